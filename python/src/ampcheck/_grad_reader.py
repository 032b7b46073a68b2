"""Where the recorder reads a step's grads (python/src/ampcheck/recorder.py): a post-accumulate-grad hook on every
parameter that requires grad notes that a backward reached the model and queues autograd's final callback; at the end
of a backward on a probe step every .grad is measured in one batch (_probes.grad_stats) if this may be the step's last
backward (as many passes as the previous step had), else each grad's identity and version are kept and read at step()
if nothing changed them; after_backward() reads them on demand; grads set without any backward are read at step().
The step's grad columns come out as 0-d float64 tensors on the loss's device, the norm divided by the loss scale the
backward used; a step whose grads cannot be read is counted and warned about once."""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

import torch

from ampcheck._probes import GradStats, grad_stats, queue_callback


class GradReader:
    """The grad readings of one Recorder. `params`: the model's parameters (the list the Recorder keeps); `probing()`:
    whether this step is a probe step; `scale_now()`: the loss scale now (1 without an enabled GradScaler), or None
    where no scaler scales; `closed()`: whether the Recorder is closed; `grads_unscaled`: the .grad the hooks read is
    already unscaled (a BackwardHookScaler)."""

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        probing: Callable[[], bool],
        scale_now: Callable[[], torch.Tensor | None],
        closed: Callable[[], bool],
        grads_unscaled: bool,
    ) -> None:
        self._params, self._probing, self._scale_now, self._closed = params, probing, scale_now, closed
        self._grads_unscaled = grads_unscaled
        self._ab_stats: GradStats | None = None  # after_backward()'s GradStats of every .grad
        self.scale_used: torch.Tensor | None = None  # the scale at after_backward()
        self._hooked: GradStats | None = (
            None  # GradStats of every .grad at the end of the step's last measured backward
        )
        # [(parameter index, weakref to its grad, the grad's version)] at a backward not measured
        self._deferred: list[tuple[int, weakref.ref[torch.Tensor], int]] | None = None
        self._passes = 0  # backward passes through the model since the last step()
        self._expected_passes = 1  # the previous step's: from which pass on the end of a backward measures
        self._in_backward = False  # a grad hook of the running backward fired (its end-of-backward callback is queued)
        self._backward_seen = False  # a grad hook fired since the last step()
        self.hook_scale: torch.Tensor | None = None  # the loss scale at the step's first grad hook (its backward's)
        self.probes: dict[str, int] = {}  # grad_probe value -> probe steps read that way
        self.steps_without_grads = 0
        self._warned_lost = self._warned_no_grads = False

    def hooks(self) -> list[Any]:
        """The grad hooks, one per parameter that requires grad (a frozen parameter unfrozen later is read at step())."""
        return [p.register_post_accumulate_grad_hook(self._on_grad) for p in self._params if p.requires_grad]

    def after_backward(self) -> None:
        """Every .grad read now, in place of the end-of-backward reading, for this step (a probe step)."""
        self.scale_used = self._scale_now()
        if self._probing():
            with torch.no_grad():
                stats = grad_stats([p.grad for p in self._params if p.grad is not None])
            self._ab_stats = stats if stats.numel else None  # no grad at all: the hooks' or step()'s reading stands

    def step_done(self) -> None:
        """step() recorded the step: the next one starts."""
        self._ab_stats, self.scale_used = None, None
        self._hooked, self._deferred, self._backward_seen, self.hook_scale = None, None, False, None
        if self._passes:
            self._expected_passes, self._passes = self._passes, 0

    def _on_grad(
        self, param: torch.Tensor
    ) -> None:  # post-accumulate-grad hook of every parameter: after backward wrote its .grad
        if self._in_backward:  # (every parameter's hook after the backward's first: nothing to do)
            return
        self._in_backward = True
        self._passes += 1
        if not self._backward_seen:  # the step's first backward: the scale it uses (update() runs after the backward)
            self._backward_seen = True
            self.hook_scale = self._scale_now()
        queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:  # autograd's final callback of a backward that reached the model
        self._in_backward = False
        # once more, so that it runs after the callbacks queued later in this backward (DDP's all-reduce finalize)
        queue_callback(self._measure_backward)

    def _measure_backward(self) -> None:
        """At the end of a backward on a probe step: every .grad measured in one batch (_grad_stats), if this may be
        the step's last backward (as many passes as the previous step had); else each grad's identity and version are
        kept, for step() to read it if nothing changes it meanwhile (a later backward replaces them anyway)."""
        if self._closed() or not self._probing():
            return
        grads = [(i, p.grad) for i, p in enumerate(self._params) if p.grad is not None]
        if self._passes >= self._expected_passes:
            with torch.no_grad():
                self._hooked = grad_stats([g for _, g in grads])
            self._deferred = None
        else:
            self._deferred = [(i, weakref.ref(g), g._version) for i, g in grads]
            self._hooked = None

    def columns(self, dev: torch.device, step: int) -> list[torch.Tensor] | None:
        """The step's grad columns as 0-d float64 tensors on dev, or None (no gradient to read: warned, counted)."""
        lost = False
        stats: GradStats | None
        scale: torch.Tensor | None
        probe: str | None
        if self._ab_stats is not None:
            stats, scale, probe = self._ab_stats, self.scale_used, "after_backward"
        elif self._hooked is not None:
            stats, scale, probe = self._hooked, self.hook_scale, "backward-hooks"
        elif self._deferred is not None:  # fewer backward passes than the previous step: read now if unchanged
            lost = any(
                (g := ref()) is None or g is not self._params[i].grad or g._version != version
                for i, ref, version in self._deferred
            )
            stats = None if lost else grad_stats([g for _, ref, _ in self._deferred if (g := ref()) is not None])
            scale, probe = self.hook_scale, None if lost else "backward-hooks"
        else:  # no backward through the model: grads set without one are read as they are now
            stats = grad_stats([p.grad for p in self._params if p.grad is not None])
            scale, probe = None, "at_step" if stats.numel else None
        if probe is None:
            self.steps_without_grads += 1
            if lost and not self._warned_lost:
                self._warned_lost = True
                warnings.warn(
                    f"ampcheck_recorder: step {step}: this step ran fewer backward passes (micro-batches) than "
                    f"the previous one, and its grads were changed or dropped (unscale_, clipping, zero_grad) before "
                    f"step(): the recorder measures at the end of the previous step's number of backward passes, so this "
                    f"step's grad_norm and grad fractions are NaN (attribute steps_without_grads counts such steps). "
                    f"Call after_backward() after the last backward of each step where the number of micro-batches "
                    f"varies",
                    stacklevel=3,
                )
            elif not lost and not self._warned_no_grads:
                self._warned_no_grads = True
                warnings.warn(
                    f"ampcheck_recorder: step {step}: no gradients seen at step() (every .grad is None and no "
                    f"backward ran through the model since the last step) — is `model` the module being trained, "
                    f"and step() called once per optimizer step, before the next backward? A loop that sets .grad "
                    f"without backward must call after_backward() or step() before "
                    f"optimizer.zero_grad(set_to_none=True). grad_norm and the grad fractions will be NaN and "
                    f"`ampcheck judge` will not judge them (attribute steps_without_grads counts such steps)",
                    stacklevel=3,
                )
            return None
        assert stats is not None  # (a probe was read)
        self.probes[probe] = self.probes.get(probe, 0) + 1
        sumsq, counts = stats.sumsq.to(dev), stats.counts.to(dev)
        if scale is not None and not self._grads_unscaled:  # (a BackwardHookScaler unscaled each grad in backward)
            sumsq = sumsq / scale.to(dev, torch.float64).square()
        nonzero, below_tiny, finite = counts.unbind()
        n = max(stats.numel, 1)
        zero = n - nonzero
        return [sumsq.sqrt(), zero / n, (below_tiny - zero) / n, (n - finite) / n]
