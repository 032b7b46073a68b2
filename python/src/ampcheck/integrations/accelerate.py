"""Accelerate custom loops: `ampcheck_recorder(accelerator, path, model, optimizer)` is a Recorder set up for an
`accelerate.Accelerator` loop — the torch optimizer inside accelerate's wrapper, the GradScaler accelerate made
(`accelerator.scaler`), the model unwrapped from a distributed wrapper — after `ampcheck.preflight` with the
accelerator's mixed precision (fp16 parameters with a GradScaler: the error run recorded and raised before any step).

    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    with ampcheck_recorder(accelerator, "runs/bf16.h5", model, optimizer) as rec:
        for batch in data:
            loss = model(**batch).loss
            accelerator.backward(loss)         # the Recorder's grad hooks read the grads here, before unscale
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step(); scheduler.step(); optimizer.zero_grad()
            rec.step(loss)

perturbation="skip" (or skip_first_step=True): the first optimizer step is not taken, recorded as skipped.

Under `ampcheck sweep` (AMPCHECK_PLAN set): the Accelerator was made (and prepare() ran) before this call, so the plan
is applied by hooks on the unwrapped model (plan_hooks.py: parameter dtype, an autocast nested inside accelerate's —
the plan's wins inside the model —, keep_fp32 modules, the skipped first step), TF32 and the seed offset set; the
GradScaler: accelerate's own where it made one and the strategy wants one, a BackwardHookScaler where it made none, and
where the strategy wants none accelerate's is replaced by a disabled one (accelerator.scaler and the optimizer's), so
accelerator.backward / clip_grad_norm_ / step pass the grads through. A plain-loop Recorder ends the process
(SystemExit(0)) once the plan's max_steps are recorded.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate import Accelerator
from torch.amp.grad_scaler import GradScaler

from ampcheck.integrations._session import RecordingSession
from ampcheck.plan_hooks import BackwardHookScaler, PlanHooks
from ampcheck.recorder import Recorder, unwrap_optimizer
from ampcheck.under_plan import UnderPlan, model_device


def ampcheck_recorder(
    accelerator: Accelerator,
    path: str,
    model: torch.nn.Module,
    optimizer: Any,
    *,
    attributes: dict[str, str] | None = None,
    run_preflight: bool = True,
    perturbation: str | None = None,
    skip_first_step: bool = False,
    **recorder_kwargs: Any,
) -> Recorder:
    mixed = str(accelerator.mixed_precision)
    stop_raises = recorder_kwargs.pop("stop_raises", True)  # a plain loop: the guard's stop is GuardStop from step()
    session = RecordingSession(
        path,
        attributes=attributes,
        run_preflight=run_preflight,
        perturbation=perturbation,
        skip_first_step=skip_first_step,
        **recorder_kwargs,
    )
    session.stop_raises = bool(stop_raises)
    inner = accelerator.unwrap_model(model)
    scaler = getattr(accelerator, "scaler", None)
    if session.plan is not None:
        scaler, mixed = _apply_plan(session, accelerator, inner, optimizer, scaler)
    recorder = session.start(
        inner, optimizer, scaler, mixed if mixed in ("fp16", "bf16") else None, f"accelerate {mixed}"
    )
    if session.under_plan is not None:
        session.under_plan.exit_at_max_steps = True  # a plain loop: the Recorder ends it at max_steps
    return recorder


def _apply_plan(
    session: RecordingSession,
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: Any,
    scaler: GradScaler | None,
) -> tuple[GradScaler | BackwardHookScaler | None, str]:
    """The plan applied by hooks (module docstring); returns (the scaler to record, the mixed precision in effect)."""
    plan = session.plan_prologue(model, "an Accelerate loop", "accelerate", torch.initial_seed())
    prec = plan.precision
    hook_scaler = None
    recorded: GradScaler | BackwardHookScaler | None = scaler
    if prec.grad_scaler and (scaler is None or not scaler.is_enabled()):
        hook_scaler = recorded = BackwardHookScaler(model_device(model))
    elif not prec.grad_scaler and scaler is not None:
        disabled = GradScaler(model_device(model).type, enabled=False)
        accelerator.scaler = disabled
        if hasattr(optimizer, "scaler"):
            optimizer.scaler = disabled
        recorded = None
    session.under_plan = UnderPlan(
        plan,
        "yes",
        PlanHooks(
            plan,
            model,
            unwrap_optimizer(optimizer),
            autocast=True,
            param_dtype=True,
            scaler=hook_scaler,
            skip_first=plan.perturbation == "skip",
        ),
    )
    autocast_dtype = prec.autocast_dtype
    mixed = (
        {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(autocast_dtype, "no")
        if autocast_dtype is not None
        else "no"
    )
    return recorded, mixed
