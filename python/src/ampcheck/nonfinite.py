"""Where a non-finite value first appeared: the module, the step and the pass (forward | backward), for `ampcheck
localize` (attributes first_nonfinite_module / _step / _pass of a recording made under a sweep plan).

Cheap by construction: no host sync on any step, a few batched kernels. A forward hook on every module of
model.named_modules() keeps, per training forward, each new floating output; at the end of every module of 8 modules
or more (a transformer layer, the root: a layer's outputs held at most) the kept outputs are reduced in one batch per
dtype to "holds an inf/NaN" device flags (their largest magnitudes: torch._foreach_norm, ord inf, on CUDA; an output
changed in place after its module returned is read at once in that module's hook from then on). A post-accumulate-grad
hook on every parameter notes the order grads accumulate in; at the end of the backward the grads are flagged the same
way, tagged with the module that owns each parameter. At the recorder's step() the flags reduce to two device numbers
— the index of the first flagged module of the forward passes and of the backward passes, in the order they ran (-1:
none) — which travel to the host with the step's other values in the recorder's one transfer at flush. A leaf
finishes its forward before its parent, so the forward's first flagged module is the innermost one that produced the
value. Backward names the first module (in backward order) whose parameter gradients were non-finite; under a
GradScaler an overflow the scaler then skips counts too (it is a non-finite value seen). Its cost on a healthy run:
python/tools/nonfinite_check.py.

The first operation (issue 52), only once a non-finite value was seen: the step's two indices are read on the host
without a sync — at once on the CPU, on CUDA from a non-blocking copy into one of 4 pinned buffers (reused; a step
whose buffer is still in flight is not read) at a later step once its event has passed — and the module is armed for
its next training forward. Forward: that forward runs under nonfinite_ops.FirstNonfiniteOp (the first aten operation
with a non-finite output; a sync per operation of that one module, once). Backward: that forward's floating outputs
get a gradient hook and the module's parameters a check after their gradients accumulate, which say whether the
gradient reaching the module was finite (its largest magnitude) and which of its parameter gradients were not — the
overflow is in the module's own backward, or it arrived from downstream; and the whole model's forward runs under
nonfinite_ops.BackwardOps, which names the first operation whose backward turned finite gradients non-finite (an SDPA
call's replayed per backend). A failure that does not recur within 3 forwards is said so (attribute
first_nonfinite_op).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ampcheck._probes import queue_callback
from ampcheck.nonfinite_ops import BackwardOps, FirstNonfiniteOp, largest
from ampcheck.plan_hooks import _floating_tensors

_TRIES = 3  # armed forwards before "did not recur"


Batch = tuple[list[int], list[int], torch.Tensor]  # (positions in the order run, module indices, bool flags)


def _nonfinite_flags(tensors: list[torch.Tensor], idxs: list[int], base: int) -> list[Batch]:
    """Whether each tensor holds an inf/NaN, batched per dtype and device: [(positions, module indices, 1-d bool
    device tensor)] (positions from `base`, in the order given). Its largest magnitude decides (inf/NaN propagate): on
    CUDA one multi-tensor kernel per batch (torch._foreach_norm, ord inf: no copy); on a CPU _foreach_max of
    _foreach_abs (its inf-norm kernel is several times slower there)."""
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for k, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.device), []).append(k)
    out = []
    with torch.no_grad():
        for (_, device), ks in groups.items():
            group = [tensors[k] for k in ks]
            top = (
                torch._foreach_max(torch._foreach_abs(group))
                if device.type == "cpu"
                else torch._foreach_norm(group, float("inf"))
            )
            out.append(([base + k for k in ks], [idxs[k] for k in ks], torch.isfinite(torch.stack(top)).logical_not()))
    return out


class NonfiniteTracker:
    def __init__(self, model: torch.nn.Module) -> None:
        self.names: list[str] = []
        self.handles: list[RemovableHandle] = []
        owner: dict[int, int] = {}
        for idx, (name, m) in enumerate(model.named_modules()):
            self.names.append(name)
            self.handles.append(m.register_forward_hook(functools.partial(self._on_forward, idx)))
            for p in m.parameters(recurse=False):
                owner.setdefault(id(p), idx)
        self._params: list[torch.nn.Parameter] = []  # every parameter that requires grad, its owner in _owner
        self._owner: list[int] = []
        for p in model.parameters():
            if p.requires_grad and id(p) in owner:
                self.handles.append(
                    p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, len(self._params)))
                )
                self._params.append(p)
                self._owner.append(owner[id(p)])
        # modules whose end reads the pending outputs (holding a block's outputs at most: activation checkpointing's
        # savings stand): the root and every module of 8 modules or more (itself included: a transformer layer)
        mods = list(model.named_modules())
        self._flush_at = {i for i, (_, m) in enumerate(mods) if i == 0 or sum(1 for _ in m.modules()) >= 8}
        self._outputs: list[tuple[int, torch.Tensor, int, int]] = []  # (module index, output, version, position)
        self._output_ids: set[int] = set()
        self._eager: set[int] = set()  # modules whose outputs are read in their hook
        # (module index, the largest magnitude of an output: a 0-d device tensor, non-finite iff the output holds an
        # inf/NaN)
        # in the order run; the backward's (owner index, its parameter's grad inf-norm), in the order accumulated
        self._forward: list[Batch] = []
        self._backward: list[Batch] = []
        self._count = 0  # forward outputs seen this step: the next one's position
        self._order: list[int] = []  # the running backward's parameters, in the order their grads accumulated
        self._index_cache: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}  # _first's index tensors per order
        self.first: tuple[str, int, str] | None = None  # (module, step, pass), once seen on the host
        self.modules = [m for _, m in model.named_modules()]
        self.op: str | None = None  # the first operation (or why none), once traced
        self._steps = 0  # collect() calls: the step being recorded
        self._ring: list[tuple[torch.Tensor, Any]] = []  # CUDA: (pinned host buffer, its copy's event)
        self._pending: list[int] = []  # ring slots whose copy is in flight, oldest first
        self._bops: BackwardOps | None = None  # the backward's operation trace of the armed forward
        self._bops_message: str | None = None  # its answer, once found
        self._armed: tuple[int, str] | None = None  # (module index, pass) to trace at its next training forward
        self._tries = 0
        self._trace_handles: list[RemovableHandle] = []
        self._mode: FirstNonfiniteOp | None = None
        self._to_remove: list[RemovableHandle] = []

    # -- the first operation: armed once a non-finite value was seen, traced at the module's next forward ------------

    def _watch(self, out: list[torch.Tensor]) -> None:
        """The step's two indices on the host without a sync; arms the first flagged module."""
        if self.op is not None or self._armed is not None:
            return
        if out[0].device.type == "cpu":
            self._arm(float(out[0]), float(out[1]))
            return
        if out[0].device.type == "cuda":
            if not self._ring:  # a few pinned buffers, reused: no allocation per step
                self._ring = [
                    (torch.empty(2, dtype=torch.float64, pin_memory=True), torch.cuda.Event()) for _ in range(4)
                ]
            while self._pending and self._ring[self._pending[0]][1].query():
                host, _ = self._ring[self._pending.pop(0)]
                if self._armed is None:
                    self._arm(float(host[0]), float(host[1]))
            free = [i for i in range(len(self._ring)) if i not in self._pending]
            if self._armed is None and free:  # (all in flight: this step's indices are not read; a later one's are)
                host, event = self._ring[free[0]]
                host.copy_(torch.stack(out), non_blocking=True)
                event.record()
                self._pending.append(free[0])

    def _arm(self, forward: float, backward: float) -> None:
        if forward >= 0:
            self._armed = (int(forward), "forward")
        elif backward >= 0:
            self._armed = (int(backward), "backward")
        else:
            return
        idx, pass_ = self._armed
        module = self.modules[idx]
        self._trace_handles = [
            module.register_forward_pre_hook(self._trace_enter),
            module.register_forward_hook(self._trace_leave, always_call=True),
        ]
        if pass_ == "backward":  # the operation: the whole model's forward traced for its backward (nonfinite_ops)
            for i, m in enumerate(self.modules):
                self._trace_handles.append(m.register_forward_pre_hook(functools.partial(self._ops_enter, i)))
                self._trace_handles.append(
                    m.register_forward_hook(functools.partial(self._ops_leave, i), always_call=True)
                )

    def _ops_enter(self, idx: int, module: torch.nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled() or self._armed is None:
            return
        if idx == 0 and self._bops is None:
            self._bops = BackwardOps()
            self._bops.__enter__()  # type: ignore[no-untyped-call]
        if self._bops is not None:
            self._bops.enter_module(self.names[idx])

    def _ops_leave(self, idx: int, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._bops is None or not self._bops.stack:
            return
        self._bops.leave_module()
        if idx == 0:
            self._bops.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def _disarm(self, op: str) -> None:
        self.op = op
        # removed at the step's end (collect), not from inside a hook that may be running through them
        self._to_remove.extend(self._trace_handles)
        self._trace_handles = []
        self._armed = None

    def _trace_enter(self, module: torch.nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled() or self._armed is None:
            return
        if self._armed[1] == "forward":
            self._mode = FirstNonfiniteOp()
            self._mode.__enter__()  # type: ignore[no-untyped-call]

    def _trace_leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled() or self._armed is None:
            return
        idx, pass_ = self._armed
        name = self.names[idx] or "(the model)"
        self._tries += 1
        at = f"traced at step {self._steps}"
        if pass_ == "forward":
            mode, self._mode = self._mode, None
            if mode is not None:
                mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
                if mode.found is not None:
                    self._disarm(f"{mode.found} in {name} (forward, {at})")
            if self._armed is not None and self._tries >= _TRIES:
                self._disarm(f"none in {name}'s next {_TRIES} forwards (the failure did not recur)")
            return
        if self._tries > _TRIES:  # (a parameter that never gets a gradient leaves its check pending: stop here)
            self._disarm(f"none in {name}'s next {_TRIES} backwards (the failure did not recur)")
            return
        self._trace_backward(idx, name, module, output, at)

    def _trace_backward(self, idx: int, name: str, module: torch.nn.Module, output: Any, at: str) -> None:
        """The gradient reaching the module's outputs and its parameters' gradients, checked as they arrive."""
        arrived: list[tuple[bool, float, str]] = []
        params = [(n, p) for n, p in module.named_parameters(recurse=False) if p.requires_grad]
        bad_params: list[str] = []
        pending = {"params": len(params)}

        def on_output_grad(g: torch.Tensor) -> None:
            arrived.append((bool(torch.isfinite(g).all()), largest([g]), str(g.dtype).replace("torch.", "")))

        def on_param(pname: str, p: torch.Tensor) -> None:
            if self._armed is None:
                return
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                bad_params.append(pname)
            pending["params"] -= 1
            if pending["params"] == 0 and self._armed is not None:
                if bad_params:
                    came = (
                        "finite (largest |grad| "
                        + f"{max(a[1] for a in arrived):.3g}, {arrived[0][2]}): the overflow is in {name}'s own backward"
                        if arrived and all(a[0] for a in arrived)
                        else "already non-finite: it came from downstream of " + name
                        if arrived
                        else "not seen"
                    )
                    self._disarm(
                        f"in {name}'s backward ({at}): the gradient reaching its output was {came}; non-finite "
                        f"gradients of {', '.join(bad_params)}"
                    )
                elif self._tries >= _TRIES:
                    self._disarm(f"none in {name}'s next {_TRIES} backwards (the failure did not recur)")
                self._to_remove.extend(hooks)

        hooks: list[RemovableHandle] = []
        for t in _floating_tensors(output):
            if t.requires_grad:
                hooks.append(t.register_hook(on_output_grad))
        for pname, p in params:
            handle = p.register_post_accumulate_grad_hook(functools.partial(on_param, pname))
            hooks.append(handle)
            self._trace_handles.append(handle)  # (removed at the disarm too, whatever is still pending)
        if not params:
            self._disarm(f"none: {name} holds no parameters to watch in its backward")

    def _on_forward(self, idx: int, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled():
            return  # evaluation forwards are not the training's
        for t in _floating_tensors(output):
            if not t.numel() or id(t) in self._output_ids:  # (a module returning its child's output: seen)
                continue
            if idx in self._eager:  # its output changed in place after it returned (seen at a flush): now
                self._forward.extend(_nonfinite_flags([t.detach()], [idx], self._count))
                self._count += 1
                continue
            # the output itself is held until the flush (not a detached view): while it is held its id cannot name
            # another tensor, so the id check above cannot skip a new output whose object took a freed one's id
            self._outputs.append((idx, t, t._version, self._count))
            self._output_ids.add(id(t))
            self._count += 1
        if idx in self._flush_at:
            self._flush()

    def _flush(self) -> None:
        """The pending outputs' largest magnitudes in one batch (a multi-tensor kernel per dtype on CUDA). An output
        changed in place since its module returned is read as it is now, and its module read at once from then on."""
        pending, self._outputs, self._output_ids = self._outputs, [], set()
        if not pending:
            return
        for idx, t, version, _ in pending:
            if t._version != version:
                self._eager.add(idx)
        batches = _nonfinite_flags([t.detach() for _, t, _, _ in pending], [idx for idx, _, _, _ in pending], 0)
        self._forward.extend(([pending[k][3] for k in ks], idxs, flags) for ks, idxs, flags in batches)

    def _on_grad(self, i: int, param: torch.Tensor) -> None:
        if not self._order:  # the backward's first: its grads read once it ends, in one batch
            queue_callback(self._on_backward_end)
        self._order.append(i)

    def _on_backward_end(self) -> None:
        """The grads of the backward that ended, in the order they accumulated: one batched inf-norm per dtype."""
        order, self._order = self._order, []
        grads = [(i, g) for i in order if (g := self._params[i].grad) is not None and g.layout == torch.strided]
        grads = [(i, g) for i, g in grads if g.numel()]
        if grads:
            base = sum(len(b[0]) for b in self._backward)
            self._backward.extend(_nonfinite_flags([g for _, g in grads], [self._owner[i] for i, _ in grads], base))

    def _first(self, batches: list[Batch], device: torch.device) -> torch.Tensor:
        """The module index of the first flagged entry in the order run (-1.0: none), a 0-d float64 device tensor.
        No sync: the index tensors are made once per layout of batches (a step's is usually the last step's)."""
        if not batches:
            return torch.full((), -1.0, dtype=torch.float64, device=device)
        flags = torch.cat([f.to(device) for _, _, f in batches])
        key = (device, tuple((tuple(p), tuple(i)) for p, i, _ in batches))
        if key not in self._index_cache:
            if len(self._index_cache) > 8:
                self._index_cache.clear()
            self._index_cache[key] = (
                torch.tensor([p for ps, _, _ in batches for p in ps], dtype=torch.float64, device=device),
                torch.tensor([float(i) for _, ids, _ in batches for i in ids], dtype=torch.float64, device=device),
            )
        pos, idx = self._index_cache[key]
        first = torch.where(flags, pos, torch.full_like(pos, float("inf"))).argmin()  # the earliest flagged
        return torch.where(flags.any(), idx[first], torch.full((), -1.0, dtype=torch.float64, device=device))

    def collect(self, device: torch.device) -> list[torch.Tensor]:
        """At the recorder's step(): [first forward module index, first backward module index] as 0-d float64 device
        tensors (-1: none), and the step's flags cleared. No sync."""
        self._flush()
        out = [self._first(self._forward, device), self._first(self._backward, device)]
        self._forward, self._backward, self._count = [], [], 0
        if self._bops is not None:  # the step's backward ran: its operation trace, with any SDPA replay
            found, self._bops = self._bops.finish(), None
            if found and self._bops_message is None:
                self._bops_message = found
        if self.op is not None and self._bops_message is not None:
            self.op += "; the first operation whose backward made a gradient non-finite: " + self._bops_message
            self._bops_message = None
        for h in self._to_remove:
            h.remove()
        self._to_remove = []
        self._watch(out)
        self._steps += 1
        return out

    def seen(self, step: int, forward: float, backward: float) -> None:
        """At flush, on the host: the step's two indices; the first non-finite step is kept."""
        if self.first is not None:
            return
        if forward >= 0:
            self.first = (self.names[int(forward)], step, "forward")
        elif backward >= 0:
            self.first = (self.names[int(backward)], step, "backward")

    def attributes(self) -> dict[str, str]:
        if self.first is None:
            return {}
        module, step, pass_ = self.first
        out = {
            "first_nonfinite_module": module or "(the model)",
            "first_nonfinite_step": str(step),
            "first_nonfinite_pass": pass_,
        }
        if self.op is not None:
            out["first_nonfinite_op"] = self.op
        return out

    def remove(self) -> None:
        if self._bops is not None:
            self._bops.remove()
            self._bops = None
        for h in self.handles + self._trace_handles + self._to_remove:
            h.remove()
        self.handles, self._trace_handles, self._to_remove = [], [], []
