"""The first non-finite operation of a training step, forward and backward (issue 52), for nonfinite.py's tracker once
it has seen a non-finite value: these run for one armed forward (and its backward), never on a healthy run.

Forward (`FirstNonfiniteOp`): a dispatch mode around the first flagged module's forward checks each aten operation's
floating outputs and keeps the first that holds an inf/NaN — the operation, its output dtype, its floating inputs'
dtypes and largest magnitude, whether they were all finite.

Backward (`BackwardOps`): a function mode around the whole model's forward puts a hook on the autograd node of every
call that made one (torch functions and tensor methods: `linear`, `scaled_dot_product_attention`, `softmax`, `mul`,
...), tagged with the module it ran in. In the backward the hooks see each node's incoming gradient (grad_outputs) and
what it produced (grad_inputs); the first node that turned finite gradients into non-finite ones is the operation whose
backward overflowed (a node whose incoming gradient was already non-finite, before any traced node produced one: the
gradient came from outside the model's forward — the loss, or its scaling). A sync per node, once.

Fused attention: where that node is `scaled_dot_product_attention`'s, its captured inputs and incoming gradient are
replayed per SDPA backend (math, flash, efficient, cuDNN where the device has them; each alone, under the call's own
autocast state) and once through the math backend in float32: which kernels overflow, and whether the gradient itself
fits the low-precision type — the trace sees the aten call, the replay what is inside the fused kernel's backward.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.hooks import RemovableHandle


def largest(tensors: list[torch.Tensor]) -> float:
    """The largest finite magnitude in the tensors (0.0 when none)."""
    out = 0.0
    for t in tensors:
        finite = t.detach()[torch.isfinite(t.detach())]
        if finite.numel():
            out = max(out, float(finite.abs().max()))
    return out


def floats(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]


def _dtype(t: torch.Tensor | torch.dtype) -> str:
    return str(t if isinstance(t, torch.dtype) else t.dtype).replace("torch.", "")


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


# -- forward ------------------------------------------------------------------------------------------------------------


class FirstNonfiniteOp(TorchDispatchMode):
    """Runs each aten operation and keeps the first whose floating output holds an inf/NaN."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.found: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.found is None:
            try:
                self._inspect(func, args, kwargs, out)
            except Exception as e:  # a diagnostic never fails the user's training: it says why it stopped instead
                self.found = f"none: the trace stopped at {func._schema.name} ({type(e).__name__}: {e})"
        return out

    def _inspect(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Keeps the operation if one of its floating outputs holds an inf/NaN (a sync, on the armed forward only)."""
        bad = [t for t in floats(out) if not bool(torch.isfinite(t).all())]
        if bad:
            ins = floats((args, kwargs))
            dtypes = "/".join(sorted({_dtype(t) for t in ins})) or "-"
            big, top = largest(ins), torch.finfo(bad[0].dtype).max
            self.found = (
                f"{func._schema.name} -> {_dtype(bad[0])} (inputs {dtypes}, largest |input| {big:.3g}"
                + (f", above {_dtype(bad[0])}'s largest {top:.5g}" if big > top else "")
                + ("" if _all_finite(ins) else ", an input already non-finite")
                + ")"
            )


# -- backward -----------------------------------------------------------------------------------------------------------

_SDPA = "scaled_dot_product_attention"


class BackwardOps(TorchFunctionMode):
    """Entered around one training forward of the whole model (with `enter_module` / `leave_module` called by the
    model's module hooks to say where each call runs); the hooks it leaves on the autograd graph find the first
    operation whose backward turned finite gradients non-finite. `found` is set during that backward."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.found: str | None = None
        self.handles: list[RemovableHandle] = []
        self._sdpa: dict[Any, tuple[Any, Any, tuple[str, torch.dtype] | None]] = {}  # node -> (args, kwargs, autocast)
        self._produced = False  # a traced node produced a non-finite gradient
        self._hooked: set[int] = set()  # ids of the nodes hooked
        self._replay: tuple[Any, Any, tuple[str, torch.dtype] | None, torch.Tensor] | None = None

    def enter_module(self, name: str) -> None:
        self.stack.append(name)

    def leave_module(self) -> None:
        if self.stack:
            self.stack.pop()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not torch.is_grad_enabled():
            return out
        name = getattr(func, "__name__", str(func))
        where = self.stack[-1] if self.stack else ""
        for t in tree_leaves(out):
            node = t.grad_fn if isinstance(t, torch.Tensor) else None
            if node is None or id(node) in self._hooked:
                continue
            if name == _SDPA:
                self._sdpa[node] = (args, kwargs, _autocast_of(args))
            # the call's own node and the nodes it made inside (a linear on 3-d input: view <- addmm/mm <- ...): the
            # graph walked back to nodes already hooked (earlier calls') or a parameter's accumulation
            todo: list[tuple[Any, str]] = [(node, name)]
            while todo:
                n, label = todo.pop()
                if n is None or id(n) in self._hooked or "AccumulateGrad" in n.name():
                    continue
                self._hooked.add(id(n))
                self.handles.append(n.register_hook(self._checker(n, label, where)))
                todo.extend((m, f"inside {name}") for m, _ in n.next_functions)
        return out

    def _checker(self, node: Any, name: str, where: str) -> Any:
        def check(grad_inputs: Any, grad_outputs: Any) -> None:
            if self.found is not None:
                return
            try:
                inspect(grad_inputs, grad_outputs)
            except Exception as e:  # (an exception in an autograd hook would fail the user's backward)
                self.found = f"none: the trace stopped at {node.name()} ({type(e).__name__}: {e})"

        def inspect(grad_inputs: Any, grad_outputs: Any) -> None:
            incoming = floats(list(grad_outputs))
            produced = floats(list(grad_inputs))
            if _all_finite(produced):
                return
            module = where or "(the model)"
            if not _all_finite(incoming):
                if not self._produced:
                    self.found = (
                        f"none in the model's forward: the gradient reaching {node.name()} ({name} in {module}) was "
                        "already non-finite — it came from outside the model's forward (the loss, or its scaling)"
                    )
                return
            self._produced = True
            bad = [t for t in produced if not bool(torch.isfinite(t).all())]
            self.found = (
                f"{node.name()} ({name} in {module}): incoming gradient {'/'.join(sorted({_dtype(t) for t in incoming}))}"
                f" finite, largest |grad| {largest(incoming):.3g}; produced a non-finite {_dtype(bad[0])} gradient"
            )
            if node in self._sdpa:  # replayed after the step (finish), not inside the running backward
                args, kwargs, autocast = self._sdpa[node]
                self._replay = (args, kwargs, autocast, incoming[0].detach().clone())

        return check

    def finish(self) -> str | None:
        """After the step's backward: what was found, with the SDPA replay where the node was attention's."""
        if self.found is not None and self._replay is not None:
            try:
                self.found += "; " + replay_sdpa(*self._replay)
            except Exception as e:  # (the replay is a diagnostic: never the user's training's failure)
                self.found += f"; its replay per backend failed ({type(e).__name__}: {e})"
        self._replay = None
        self.remove()
        return self.found

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles, self._sdpa = [], {}


def _autocast_of(args: Any) -> tuple[str, torch.dtype] | None:
    """The autocast state the call ran under (device type, dtype), for its replay."""
    ts = floats(args)
    if not ts:
        return None
    device = ts[0].device.type
    if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
        return device, torch.get_autocast_dtype(device)
    return None


def _backends(device: str) -> list[Any]:
    from torch.nn.attention import SDPBackend

    if device == "cuda":
        return [
            SDPBackend.MATH,
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
        ]
    return [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]


def _replay_one(
    args: Any, kwargs: Any, autocast: tuple[str, torch.dtype] | None, grad: torch.Tensor, backend: Any, upcast: bool
) -> str:
    """One replay of an SDPA call's forward and backward: 'finite (largest |grad| X)', 'non-finite' or why it could
    not run."""
    from torch.nn.attention import sdpa_kernel

    def fresh(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            b = a.detach().float() if upcast else a.detach().clone()
            return b.requires_grad_(a.requires_grad)
        return a

    inputs = [fresh(a) for a in args]
    kw = {k: fresh(v) for k, v in kwargs.items()}
    named = list(zip(("query", "key", "value", "attn_mask"), inputs)) + list(kw.items())
    named = [(n, a) for n, a in named if isinstance(a, torch.Tensor) and a.requires_grad]
    leaves = [a for _, a in named]
    cast = (
        torch.autocast(autocast[0], dtype=autocast[1])
        if autocast is not None and not upcast
        else contextlib.nullcontext()
    )
    try:
        with sdpa_kernel([backend]), cast:
            out = torch.nn.functional.scaled_dot_product_attention(*inputs, **kw)
        grads = torch.autograd.grad(out, leaves, grad.to(out.dtype), allow_unused=True)
    except RuntimeError as e:  # (a backend that does not take these inputs)
        return "not available (" + str(e).splitlines()[0][:80] + ")"
    got = [g for g in grads if g is not None]
    bad = [n for (n, _), g in zip(named, grads) if g is not None and not bool(torch.isfinite(g).all())]
    if bad:
        return f"non-finite ({_dtype(got[0])} gradient of {', '.join(bad)})"
    return f"finite (largest |grad| {largest(got):.3g})"


def replay_sdpa(args: Any, kwargs: Any, autocast: tuple[str, torch.dtype] | None, grad: torch.Tensor) -> str:
    """The failing SDPA call's backward replayed per backend on its captured inputs and incoming gradient."""
    from torch.nn.attention import SDPBackend

    ts = floats(args)
    device = ts[0].device.type if ts else "cpu"
    low = autocast[1] if autocast else (ts[0].dtype if ts else torch.float32)
    names = {
        SDPBackend.MATH: "math",
        SDPBackend.FLASH_ATTENTION: "flash",
        SDPBackend.EFFICIENT_ATTENTION: "efficient",
        SDPBackend.CUDNN_ATTENTION: "cudnn",
    }
    parts = [f"{names[b]} {_replay_one(args, kwargs, autocast, grad, b, upcast=False)}" for b in _backends(device)]
    fp32 = _replay_one(args, kwargs, autocast, grad.float(), SDPBackend.MATH, upcast=True)
    top = torch.finfo(low).max if low.is_floating_point else float("inf")
    verdict = ""
    if fp32.startswith("finite"):
        big = float(fp32.split("largest |grad| ")[1].rstrip(")"))
        verdict = (
            f": the gradient itself exceeds {_dtype(low)}'s largest {top:.5g}"
            if big > top
            else f": it fits {_dtype(low)} — the overflow is inside the low-precision kernel's backward"
        )
    dropout = kwargs.get("dropout_p", args[3] if len(args) > 3 else 0.0)
    note = " (dropout: each replay draws its own mask)" if isinstance(dropout, float) and dropout > 0 else ""
    return (
        f"replayed on its captured inputs per backend ({_dtype(low)}): {', '.join(parts)}; "
        f"math in float32 {fp32}{verdict}{note}"
    )
