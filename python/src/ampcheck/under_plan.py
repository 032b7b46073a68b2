"""One recording under a sweep plan: what was applied (or why it was refused), for the Recorder to record, and the
plan applied to a plain PyTorch loop (the Recorder's own model / optimizer / scaler) when no integration did it.

The integrations (integrations/hf.py, lightning.py, accelerate.py) apply the plan through their framework and hand the
Recorder an `UnderPlan`; a Recorder made with none while AMPCHECK_PLAN is set calls `apply_to_loop` itself.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.amp.grad_scaler import GradScaler

from ampcheck.plan import Plan, refusal, reseed, set_tf32, unknown_modules
from ampcheck.plan_hooks import BackwardHookScaler, PlanHooks


@dataclasses.dataclass
class UnderPlan:
    plan: Plan
    applied: str = "yes"  # "yes" | "refused: <why>"
    hooks: PlanHooks | None = None
    exit_at_max_steps: bool = True  # a plain loop ends (SystemExit(0)) once max_steps are recorded;
    # a framework's callback stops its trainer instead

    @property
    def refused(self) -> bool:
        return self.applied != "yes"

    def planned_skips(self) -> list[int]:
        w = self.hooks.step_wrapper if self.hooks is not None else None
        return w.planned_skips if w is not None else []


class PlanRefused(RuntimeError):
    """The run cannot train as planned; recorded as the error run (plan_applied 'refused: <why>')."""


def model_device(model: torch.nn.Module | None) -> torch.device:
    p = next(model.parameters(), None) if model is not None else None
    return p.device if p is not None else torch.device("cpu")


def check(plan: Plan, model: torch.nn.Module | None, framework: str) -> str | None:
    """Why `framework` cannot apply the plan to this model (refusal text), or None."""
    why = refusal(plan, model_device(model), framework)
    if why is None and model is not None:
        unknown = unknown_modules(model, plan.keep_fp32)
        if unknown:
            why = (
                f"keep_fp32 names {', '.join(map(repr, unknown))}, not a module of the recorded "
                f"{type(model).__name__} (its model.named_modules() names are in the 'modules' attribute)"
            )
    elif why is None and plan.keep_fp32:
        why = "keep_fp32 needs the model (Recorder(..., model=...))"
    return why


def fp8_convert(model: torch.nn.Module) -> None:
    """torchao float8 training: nn.Linear layers converted in place (fp8_refusal said torchao and an FP8 GPU exist)."""
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(model)


def apply_to_loop(
    plan: Plan,
    model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer | None,
    scaler: GradScaler | BackwardHookScaler | None,
    *,
    skip_first: bool,
) -> tuple[UnderPlan, GradScaler | BackwardHookScaler | None]:
    """The plan applied to a plain loop by hooks (plan_hooks.py). Returns (what was applied, the scaler the Recorder
    records: the script's own GradScaler when the strategy wants one and it is enabled, else a BackwardHookScaler, or
    None). The script's own GradScaler is used where the strategy wants one and it is enabled; a disabled one is left
    as it is (a pass-through) and the hooks scale; an enabled one is switched off where the strategy wants none."""
    why = (
        check(plan, model, "a plain PyTorch loop")
        if model is not None
        else "the plan needs the model (Recorder(..., model=..., optimizer=...)) to apply its precision"
    )
    prec = plan.precision
    if why is None and (prec.grad_scaler or plan.perturbation == "skip" or skip_first) and optimizer is None:
        why = "the strategy / skip needs the optimizer (Recorder(..., optimizer=...))"
    if why is not None:
        return UnderPlan(plan, f"refused: {why}"), scaler
    assert model is not None  # (check() refuses a plan without the model)
    set_tf32(prec.tf32)
    if plan.seed_offset:
        reseed(torch.initial_seed(), plan)
    hook_scaler = None
    if prec.grad_scaler and (scaler is None or not scaler.is_enabled()):
        # no GradScaler, or the script's made disabled for this run's own dtype setting (nanoGPT's
        # `GradScaler(enabled=(dtype == 'float16'))`): a disabled one passes everything through, the hooks scale
        hook_scaler = BackwardHookScaler(model_device(model))
    elif not prec.grad_scaler and scaler is not None and scaler.is_enabled():
        setattr(scaler, "_enabled", False)  # noqa: B010 the script's GradScaler passes through (no public switch)
    if plan.strategy == "fp8":
        fp8_convert(model)
    hooks = PlanHooks(
        plan,
        model,
        optimizer,
        autocast=True,
        param_dtype=True,
        scaler=hook_scaler,
        skip_first=skip_first or plan.perturbation == "skip",
    )
    recorded = hook_scaler if hook_scaler is not None else scaler
    return UnderPlan(plan, "yes", hooks), recorded
