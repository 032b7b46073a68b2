"""Applying a sweep plan (plan.py) to a model and optimizer through hooks, for loops no framework runs.

Everything here is undone by `PlanHooks.remove()` except the parameters' dtype, which the plan sets for the run:
  - param dtype       model.to(the strategy's dtype) (pure-bf16: bfloat16; else float32), keep_fp32 modules float32
  - autocast          a forward pre-hook on the model enters torch.autocast(device, dtype, enabled) — nested inside
                      any autocast the script opens, so the plan's setting wins inside the model — and a forward hook
                      (always_call) leaves it; floating outputs leave an autocast or pure-bf16 forward as float32 (as
                      accelerate's convert_outputs_to_fp32), floating inputs enter a pure-bf16 model as bfloat16
  - keep_fp32         per named module: autocast off inside it, floating inputs cast to float32; under pure-bf16 its
                      parameters stay float32 and its floating outputs are cast back to the model's dtype; "" (the
                      root): the whole model in FP32 (its autocast entered disabled, its parameters float32)
  - GradScaler        BackwardHookScaler: the grads flowing into the model's outputs — those no other output is
                      computed from: a loss the model computes from its logits is scaled, the logits not again — are
                      multiplied by the scale (as
                      scaling the loss would: the backward runs on scaled values and overflows where a scaled loss's
                      would), each parameter's grad is unscaled and checked for inf/NaN before it is accumulated
                      (torch's own fused unscale kernel; no sync), and the optimizer's step is wrapped: skipped when
                      an inf/NaN was found (one host read per step, as GradScaler.step), then the scale updated
                      (torch._amp_update_scale_, GradScaler's rule). The .grad the loop sees is already unscaled, so
                      clipping and gradient accumulation work unchanged.
  - skip              the first optimizer step is not taken (a closure, as Lightning passes, still runs)
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from ampcheck.plan import Plan, is_container


def cast_floating(obj: Any, dtype: torch.dtype) -> Any:
    """obj with every floating tensor in it (tuples, lists, dicts, ModelOutputs) cast to dtype."""
    if torch.is_tensor(obj):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(cast_floating(o, dtype) for o in obj)
    if isinstance(obj, list):
        return [cast_floating(o, dtype) for o in obj]
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for k, v in obj.items():
            if v is not None:
                out[k] = cast_floating(v, dtype)
        return out
    return obj


def _floating_tensors(obj: Any) -> list[torch.Tensor]:
    if torch.is_tensor(obj):
        return [obj] if obj.is_floating_point() else []
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _floating_tensors(o)]
    if isinstance(obj, dict):
        return [t for v in obj.values() if v is not None for t in _floating_tensors(v)]
    return []


def _upstream_outputs(tensors: list[torch.Tensor]) -> set[int]:
    """Of a forward's floating outputs that require grad, the indices of those another of them is computed from. A
    loss computed inside the model from its logits (transformers, given labels) reaches the logits' grad through the
    loss: scaling both would scale that grad twice (the param grads then come out `scale` times too large, and the
    backward overflows at the square of the scale). Walks the autograd graph from each output until the others are
    found or the graph ends (PlanHooks does it once per output structure, not every step)."""
    by_fn = {t.grad_fn: i for i, t in enumerate(tensors) if t.grad_fn is not None}
    upstream: set[int] = set()
    for t in tensors:
        if t.grad_fn is None:
            continue
        seen, frontier = {t.grad_fn}, [t.grad_fn]
        while frontier and len(upstream) < len(by_fn) - 1:
            fn = frontier.pop()
            for nxt, _ in fn.next_functions:
                if nxt is None or nxt in seen:
                    continue
                seen.add(nxt)
                if nxt in by_fn:
                    upstream.add(by_fn[nxt])
                frontier.append(nxt)
    return upstream


def _called(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The module, or for a container (never called: its hooks would never run) the modules in it that are."""
    if not is_container(module):
        return [module]
    return [m for child in module.children() for m in _called(child)]


def _device_type(module: torch.nn.Module) -> str:
    p = next(module.parameters(), None)
    return p.device.type if p is not None else "cpu"


class BackwardHookScaler:
    """A dynamic loss scaler applied by hooks (module docstring). The Recorder reads it as a GradScaler: is_enabled(),
    _scale, _init_scale, _growth_interval; grads_unscaled_in_backward tells it the .grad it reads is unscaled."""

    grads_unscaled_in_backward = True

    def __init__(
        self,
        device: torch.device,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self._init_scale, self._growth_factor, self._backoff_factor = init_scale, growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._scale = torch.full((), init_scale, dtype=torch.float32, device=device)
        self._inv_scale = torch.full((), 1.0 / init_scale, dtype=torch.float32, device=device)
        self._growth_tracker = torch.zeros((), dtype=torch.int32, device=device)
        self._found_inf = torch.zeros((), dtype=torch.float32, device=device)

    def is_enabled(self) -> bool:
        return True

    def get_scale(self) -> float:
        return float(self._scale)  # (a sync: for callers, not the hooks)

    def scale_output_grad(self, grad: torch.Tensor) -> torch.Tensor:
        return grad * self._scale  # (a 0-d float32 factor keeps a float16 grad float16: it may overflow, as it should)

    def unscale_param_grad(self, grad: torch.Tensor) -> torch.Tensor:
        if grad.layout != torch.strided:  # a sparse grad: plain ops
            out = grad * self._inv_scale
            self._found_inf.add_((~torch.isfinite(out.coalesce().values())).any().float())
            return out
        out = grad.clone()  # (the grad handed to a hook may be shared: unscale a copy)
        torch._amp_foreach_non_finite_check_and_unscale_([out], self._found_inf, self._inv_scale.to(out.device))
        return out

    def found_inf_and_update(self) -> bool:
        """After the step's backward(s): whether an inf/NaN was found (one host read — the sync GradScaler.step makes
        too), then the scale updated by GradScaler's rule and the flag cleared."""
        found = bool(self._found_inf.item())  # sync point: the skip decision needs it on the host
        torch._amp_update_scale_(
            self._scale,
            self._growth_tracker,
            self._found_inf,
            self._growth_factor,
            self._backoff_factor,
            self._growth_interval,
        )
        torch.reciprocal(self._scale, out=self._inv_scale)
        self._found_inf.zero_()
        return found


class StepWrapper:
    """Replaces optimizer.step (an instance attribute: accelerate's, Lightning's and GradScaler's calls all reach it)
    to skip the first step (skip_first) and/or a step whose grads a BackwardHookScaler found non-finite."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, *, skip_first: bool, scaler: BackwardHookScaler | None
    ) -> None:
        self.optimizer, self.skip_first, self.scaler = optimizer, skip_first, scaler
        self.calls = 0
        self.planned_skips: list[int] = []  # step calls not taken because the plan / skip_first_step said so
        self._inner = optimizer.__dict__.get("step")  # an instance wrapper already there (an LR scheduler's)
        self._original = optimizer.step
        setattr(optimizer, "step", self._step)  # noqa: B010 (an instance attribute over the method: mypy forbids the plain assignment)

    def _step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        call = self.calls
        self.calls += 1
        result = None
        if closure is not None and (self.scaler is not None or (self.skip_first and call == 0)):
            with torch.enable_grad():
                result = closure()  # (Lightning's closure runs forward and backward)
            closure = None
        inf = self.scaler.found_inf_and_update() if self.scaler is not None else False
        if self.skip_first and call == 0:
            self.planned_skips.append(call)
            return result
        if inf:
            return result
        out = self._original(closure, **kwargs) if closure is not None else self._original(**kwargs)
        return result if out is None else out

    def remove(self) -> None:
        if self.optimizer.__dict__.get("step") == self._step:
            if self._inner is None:
                del self.optimizer.step
            else:
                setattr(self.optimizer, "step", self._inner)  # noqa: B010 (as in __init__)


class PlanHooks:
    """The plan applied to `model` (and `optimizer`) by hooks. autocast=False where a framework applies the autocast
    itself (the keep_fp32 hooks still go on); scaler: a BackwardHookScaler to install, or None."""

    def __init__(
        self,
        plan: Plan,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        autocast: bool = True,
        param_dtype: bool = True,
        scaler: BackwardHookScaler | None = None,
        skip_first: bool = False,
    ) -> None:
        self.plan, self.model, self.scaler = plan, model, scaler
        self._upstream: dict[tuple[Any, ...], set[int]] = {}  # output structure -> outputs computed from others
        self.handles: list[Any] = []
        self.step_wrapper: StepWrapper | None = None
        prec = plan.precision
        self.model_dtype = (
            prec.param_dtype
            if param_dtype
            else next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        )
        if param_dtype:
            model.to(prec.param_dtype)
        # keep_fp32 "" (the root): the whole model in FP32 — the model's own autocast entered disabled, not a second
        # pair of hooks on the root (two autocast contexts on one module leave in the wrong order)
        self.whole_model_fp32 = "" in plan.keep_fp32
        keep = [m for n in plan.keep_fp32 if n for m in _called(model.get_submodule(n))]
        if self.whole_model_fp32:
            model.float()
            self.model_dtype = torch.float32
        for m in keep:
            m.float()
        if autocast or scaler is not None:
            self._autocast_stack: list[torch.autocast] = []
            self.handles.append(model.register_forward_pre_hook(self._enter_model, with_kwargs=True))
            self.handles.append(
                model.register_forward_hook(lambda mod, args, out: self._leave_model(out, autocast), always_call=True)
            )
            self._autocast = autocast
        for m in keep:
            stack: list[torch.autocast] = []
            self.handles.append(
                m.register_forward_pre_hook(
                    lambda mod, args, kwargs, stack=stack: self._enter_fp32(mod, args, kwargs, stack), with_kwargs=True
                )
            )
            self.handles.append(
                m.register_forward_hook(
                    lambda mod, args, out, stack=stack: self._leave_fp32(out, stack), always_call=True
                )
            )
        if scaler is not None:
            for p in model.parameters():
                if p.requires_grad:
                    self.handles.append(p.register_hook(scaler.unscale_param_grad))
        if optimizer is not None and (skip_first or scaler is not None):
            self.step_wrapper = StepWrapper(optimizer, skip_first=skip_first, scaler=scaler)

    # -- the model's autocast -----------------------------------------------------------------------------------------

    def _enter_model(self, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        if not self._autocast:
            return None
        dtype = self.plan.precision.autocast_dtype
        enabled = dtype is not None and not self.whole_model_fp32
        ctx = torch.autocast(_device_type(module), dtype=dtype or torch.bfloat16, enabled=enabled)
        ctx.__enter__()
        self._autocast_stack.append(ctx)
        if self.model_dtype != torch.float32:  # pure 16-bit: floating inputs in the parameters' dtype
            return cast_floating(args, self.model_dtype), cast_floating(kwargs, self.model_dtype)
        return None

    def _leave_model(self, out: Any, autocast: Any) -> Any:
        if autocast and self._autocast_stack:
            self._autocast_stack.pop().__exit__(None, None, None)
            if self.plan.precision.autocast_dtype is not None or self.model_dtype != torch.float32:
                # (pure 16-bit too: a loss the loop computes outside the model against an fp32 target — mse_loss —
                # would fail in the backward on the mixed dtypes, a crash the plan made, not the precision)
                out = cast_floating(out, torch.float32)
        if self.scaler is not None and torch.is_grad_enabled():
            outputs = [t for t in _floating_tensors(out) if t.requires_grad]
            # which outputs are computed from others: walked once per output structure (count, shapes, dtypes) —
            # the same forward gives the same graph every step; a full walk costs 0.3-0.8 ms for a 12-layer GPT-2 (857 nodes, CPU)
            shape = tuple((tuple(t.shape), t.dtype) for t in outputs)
            if len(outputs) > 1 and shape not in self._upstream:
                self._upstream[shape] = _upstream_outputs(outputs)
            skip = self._upstream.get(shape, set())
            for i, t in enumerate(outputs):
                if i not in skip:
                    t.register_hook(self.scaler.scale_output_grad)
        return out

    # -- keep_fp32 modules --------------------------------------------------------------------------------------------

    def _enter_fp32(self, module: torch.nn.Module, args: Any, kwargs: Any, stack: list[Any]) -> Any:
        ctx = torch.autocast(_device_type(module), enabled=False)
        ctx.__enter__()
        stack.append(ctx)
        return cast_floating(args, torch.float32), cast_floating(kwargs, torch.float32)

    def _leave_fp32(self, out: Any, stack: list[Any]) -> Any:
        if stack:
            stack.pop().__exit__(None, None, None)
        if self.model_dtype != torch.float32:
            return cast_floating(out, self.model_dtype)
        return None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.step_wrapper is not None:
            self.step_wrapper.remove()
