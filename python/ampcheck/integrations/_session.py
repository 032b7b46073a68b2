"""What every integration does at the start of training: a Recorder over the torch optimizer inside the framework's
wrapper, then `ampcheck.preflight` — a setup PyTorch will refuse is recorded as the error run and raised before any
step. Under a sweep plan (AMPCHECK_PLAN) the integration applies the plan through its framework first and hands the
Recorder what it applied (`UnderPlan`); the Recorder then records where the plan says, with the plan's attributes."""
from __future__ import annotations

from typing import Dict, List, Optional

from ampcheck.plan import Plan, current_plan
from ampcheck.plan_hooks import StepWrapper
from ampcheck.preflight import PreflightError, PreflightFinding, preflight
from ampcheck.recorder import PERTURBATIONS, Recorder, unwrap_optimizer
from ampcheck.under_plan import UnderPlan


class RecordingSession:
    def __init__(self, path: str, *, attributes: Optional[Dict[str, str]] = None, probe_every: int = 1,
                 overwrite: bool = False, run_preflight: bool = True, snapshot_every: Optional[int] = None,
                 perturbation: Optional[str] = None, skip_first_step: bool = False):
        self.path, self.attributes, self.probe_every, self.overwrite = path, dict(attributes or {}), probe_every, overwrite
        self.run_preflight, self.snapshot_every = run_preflight, snapshot_every
        if perturbation is not None and perturbation not in PERTURBATIONS:
            raise ValueError(f"perturbation {perturbation!r}: must be one of {', '.join(map(repr, PERTURBATIONS))}")
        if skip_first_step and perturbation not in (None, "skip"):
            raise ValueError(f"skip_first_step=True records perturbation 'skip', not {perturbation!r}")
        # perturbation="skip": the integration itself does not take the first optimizer step (the script cannot)
        self.skip_first_step = skip_first_step or perturbation == "skip"
        self.perturbation = "skip" if self.skip_first_step else perturbation
        self.recorder: Optional[Recorder] = None
        self.findings: List[PreflightFinding] = []
        self.plan: Optional[Plan] = current_plan()
        self.under_plan: Optional[UnderPlan] = None   # set by the integration once it applied (or refused) the plan
        self._skipper: Optional[StepWrapper] = None

    def skip_first(self) -> bool:
        """Whether this run does not take its first optimizer step (skip_first_step, perturbation 'skip', the plan)."""
        return self.plan.perturbation == "skip" if self.plan is not None else self.skip_first_step

    def wrap_step(self, optimizer) -> None:
        """The first step not taken, where asked (outside a plan: skip_first_step / perturbation='skip'; under a plan
        the PlanHooks made by the integration do it)."""
        if self.plan is None and self.skip_first_step and optimizer is not None and self._skipper is None:
            self._skipper = StepWrapper(unwrap_optimizer(optimizer), skip_first=True, scaler=None)

    def planned_skips(self) -> List[int]:
        if self.under_plan is not None:
            return self.under_plan.planned_skips()
        return self._skipper.planned_skips if self._skipper is not None else []

    def start(self, model, optimizer, scaler, mixed_precision: Optional[str], strategy: str,
              autocast_active: Optional[bool] = None) -> Recorder:
        """The Recorder (`optimizer` may be a framework's wrapper: the Recorder unwraps it and names it), then preflight."""
        attrs = {"strategy": strategy}
        attrs.update(self.attributes)
        if self.plan is not None and self.under_plan is None:  # the integration did not get to apply it
            self.under_plan = UnderPlan(self.plan, "refused: the integration could not apply the plan before training")
        if self.under_plan is not None:
            self.under_plan.exit_at_max_steps = False  # the integration stops its trainer itself
        else:
            self.wrap_step(optimizer)
        self.recorder = Recorder(self.path, model, optimizer, scaler, attributes=attrs, probe_every=self.probe_every,
                                 overwrite=self.overwrite, snapshot_every=self.snapshot_every,
                                 perturbation=self.perturbation if self.under_plan is None else None,
                                 under_plan=self.under_plan)
        if self.run_preflight:
            inner = unwrap_optimizer(optimizer) if optimizer is not None else None
            try:
                self.findings = preflight(model, inner, scaler=scaler, mixed_precision=mixed_precision,
                                          autocast_active=autocast_active)
            except PreflightError as e:
                self.findings = e.findings
                self.recorder._finish(e)  # the error run, with PyTorch's text, before any step
                raise
        return self.recorder

    def open(self) -> bool:
        return self.recorder is not None and not self.recorder._closed

    def reached_max_steps(self, steps_done: int) -> bool:
        """Under a plan with max_steps: whether the trainer should stop now (the recording is then complete)."""
        return self.plan is not None and self.plan.max_steps > 0 and steps_done >= self.plan.max_steps
