"""Where a non-finite value first appeared: the module, the step and the pass (forward | backward), for `ampcheck
localize` (attributes first_nonfinite_module / _step / _pass of a recording made under a sweep plan).

Cheap by construction: no host sync on any step. A forward hook on every module of model.named_modules() leaves, per
training forward, a device flag "some floating output of this module is inf/NaN" (two small kernels); a
post-accumulate-grad hook on every parameter leaves the same for its .grad, tagged with the module that owns the
parameter. At the recorder's step() the flags reduce to two device numbers — the index of the first flagged module of
the forward passes and of the backward passes, in the order they ran (-1: none) — which travel to the host with the
step's other values in the recorder's one transfer at flush. A leaf finishes its forward before its parent, so the
forward's first flagged module is the innermost one that produced the value. Backward names the first module (in
backward order) whose parameter gradients were non-finite; under a GradScaler an overflow the scaler then skips counts
too (it is a non-finite value seen).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ampcheck.plan_hooks import _floating_tensors


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
        for p in model.parameters():
            if p.requires_grad and id(p) in owner:
                self.handles.append(
                    p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, owner[id(p)]))
                )
        self._forward: list[tuple[int, torch.Tensor]] = []  # (module index, device bool flag) in the order run
        self._backward: list[tuple[int, torch.Tensor]] = []
        self.first: tuple[str, int, str] | None = None  # (module, step, pass), once seen on the host

    def _on_forward(self, idx: int, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled():
            return  # evaluation forwards are not the training's
        for t in _floating_tensors(output):
            if t.numel():
                self._forward.append((idx, torch.isfinite(t.detach()).all().logical_not()))

    def _on_grad(self, idx: int, param: torch.Tensor) -> None:
        g = param.grad
        if g is not None and g.layout == torch.strided and g.numel():
            self._backward.append((idx, torch.isfinite(g).all().logical_not()))

    @staticmethod
    def _first(flags: list[tuple[int, torch.Tensor]], device: torch.device) -> torch.Tensor:
        if not flags:
            return torch.full((), -1.0, dtype=torch.float64, device=device)
        bad = torch.stack([f.to(device) for _, f in flags])
        where = torch.tensor([i for i, _ in flags], dtype=torch.float64, device=device)
        first = bad.to(torch.uint8).argmax()  # the first True (0 when none: masked below)
        return torch.where(bad.any(), where[first], torch.full((), -1.0, dtype=torch.float64, device=device))

    def collect(self, device: torch.device) -> list[torch.Tensor]:
        """At the recorder's step(): [first forward module index, first backward module index] as 0-d float64 device
        tensors (-1: none), and the step's flags cleared. No sync."""
        out = [self._first(self._forward, device), self._first(self._backward, device)]
        self._forward, self._backward = [], []
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
        return {
            "first_nonfinite_module": module or "(the model)",
            "first_nonfinite_step": str(step),
            "first_nonfinite_pass": pass_,
        }

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
