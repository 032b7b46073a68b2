"""What every integration does at the start of training: a Recorder over the torch optimizer inside the framework's
wrapper, then `ampcheck.preflight` — a setup PyTorch will refuse is recorded as the error run and raised before any
step. Under a sweep plan (AMPCHECK_PLAN) the integration applies the plan through its framework first — what every
integration does alike (refusal, TF32, reseeding, fp8 conversion) is `RecordingSession.plan_prologue` — and hands the
Recorder what it applied (`UnderPlan`); the Recorder then records where the plan says, with the plan's attributes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch.amp.grad_scaler import GradScaler

from ampcheck.plan import Plan, current_plan, reseed, set_tf32
from ampcheck.plan_hooks import BackwardHookScaler, StepWrapper
from ampcheck.preflight import PreflightError, PreflightFinding, preflight
from ampcheck.recorder import DEFAULT_PROBE_EVERY, Recorder, RecorderOptions, unwrap_optimizer
from ampcheck.under_plan import UnderPlan, check, fp8_convert


class RecordingSession:
    """What every integration holds: its arguments (checked before any training), the preflight findings, the sweep's
    plan, and the Recorder once training starts. The HF and Lightning callbacks are RecordingSessions: this __init__
    is theirs (its arguments are theirs), and each sets up its own state in _own_state()."""

    stop_raises = False  # the live guard's stop: the trainer stops (False) or GuardStop from step() (a plain loop)

    def __init__(
        self,
        path: str,
        *,
        attributes: dict[str, str] | None = None,
        probe_every: int = DEFAULT_PROBE_EVERY,
        overwrite: bool = False,
        run_preflight: bool = True,
        snapshot_every: int | None = None,
        perturbation: str | None = None,
        skip_first_step: bool = False,
        reference: str | None = None,
        judge_every: int = 50,
        stop_on: Sequence[str] = (),
        per_rank: bool = False,
    ) -> None:
        self.path, self.attributes, self.run_preflight = path, dict(attributes or {}), run_preflight
        # the Recorder's options, checked now, before any training; the attributes, the plan and stop_raises are added
        # when the Recorder is made (start)
        given = RecorderOptions(
            probe_every=probe_every,
            overwrite=overwrite,
            snapshot_every=snapshot_every,
            perturbation=perturbation,
            skip_first_step=skip_first_step,
            reference=reference,
            judge_every=judge_every,
            stop_on=stop_on,
            per_rank=per_rank,
        )
        # perturbation="skip": the integration itself does not take the first optimizer step (the script cannot);
        # the Recorder records 'skip' and leaves the steps alone
        self.skip_first_step = skip_first_step or perturbation == "skip"
        self.options = dataclasses.replace(
            given, skip_first_step=False, perturbation="skip" if self.skip_first_step else perturbation
        )
        self.recorder: Recorder | None = None
        self.findings: list[PreflightFinding] = []
        self.plan: Plan | None = current_plan()
        self.under_plan: UnderPlan | None = None  # set by the integration once it applied (or refused) the plan
        self._skipper: StepWrapper | None = None
        self._own_state()

    def _own_state(self) -> None:
        """The integration's own state, set up at the end of __init__ (the callbacks override it)."""

    def skip_first(self) -> bool:
        """Whether this run does not take its first optimizer step (skip_first_step, perturbation 'skip', the plan)."""
        return self.plan.perturbation == "skip" if self.plan is not None else self.skip_first_step

    def wrap_step(self, optimizer: Any) -> None:
        """The first step not taken, where asked (outside a plan: skip_first_step / perturbation='skip'; under a plan
        the PlanHooks made by the integration do it)."""
        if self.plan is None and self.skip_first_step and optimizer is not None and self._skipper is None:
            self._skipper = StepWrapper(unwrap_optimizer(optimizer), skip_first=True, scaler=None)

    def plan_prologue(self, model: torch.nn.Module, framework: str, strategy: str, seed: int | None) -> Plan:
        """What the sweep's plan asks of every integration's run before its framework's own part: the plan refused
        where `framework` cannot apply it to this model (the error run recorded at the plan's path with `strategy`,
        then the process ends: SystemExit), TF32 set, the global RNGs reseeded from `seed` + the plan's seed_offset
        (seed None: the integration reseeds later, with reseed_for_plan), an fp8 plan's nn.Linear layers converted
        (torchao). Called under a plan only; returns it."""
        plan = self.plan
        assert plan is not None  # called only under a plan
        why = check(plan, model, framework)
        if why is not None:  # the error run at the plan's path, then the process ends (SystemExit)
            self.under_plan = UnderPlan(plan, f"refused: {why}")
            self.start(model, None, None, None, strategy)
        set_tf32(plan.precision.tf32)
        if seed is not None:
            self.reseed_for_plan(seed)
        if plan.strategy == "fp8":
            fp8_convert(model)
        return plan

    def reseed_for_plan(self, seed: int) -> None:
        """The global RNGs reseeded with `seed` + the plan's seed_offset (data order and dropout), where it has one."""
        if self.plan is not None and self.plan.seed_offset:
            reseed(seed, self.plan)

    def planned_skips(self) -> list[int]:
        if self.under_plan is not None:
            return self.under_plan.planned_skips()
        return self._skipper.planned_skips if self._skipper is not None else []

    def start(
        self,
        model: torch.nn.Module,
        optimizer: Any,
        scaler: GradScaler | BackwardHookScaler | None,
        mixed_precision: str | None,
        strategy: str,
        autocast_active: bool | None = None,
    ) -> Recorder:
        """The Recorder (`optimizer` may be a framework's wrapper: the Recorder unwraps it and names it), then preflight."""
        attrs = {"strategy": strategy}
        attrs.update(self.attributes)
        if self.plan is not None and self.under_plan is None:  # the integration did not get to apply it
            self.under_plan = UnderPlan(self.plan, "refused: the integration could not apply the plan before training")
        if self.under_plan is not None:
            self.under_plan.exit_at_max_steps = False  # the integration stops its trainer itself
        else:
            self.wrap_step(optimizer)
        options = dataclasses.replace(
            self.options,
            attributes=attrs,
            perturbation=self.options.perturbation if self.under_plan is None else None,
            under_plan=self.under_plan,
            stop_raises=self.stop_raises,
        )
        self.recorder = Recorder(self.path, model, optimizer, scaler, options=options)
        if self.run_preflight:
            inner = unwrap_optimizer(optimizer) if optimizer is not None else None
            try:
                self.findings = preflight(
                    model, inner, scaler=scaler, mixed_precision=mixed_precision, autocast_active=autocast_active
                )
            except PreflightError as e:
                self.findings = e.findings
                self.recorder._finish(e)  # the error run, with PyTorch's text, before any step
                raise
        return self.recorder

    def open(self) -> bool:
        return self.recorder is not None and not self.recorder._closed

    def stepping(self) -> bool:
        """Whether the trainer's steps go to the Recorder: it records, or it is another rank's (not recording: it
        counts steps so that every rank agrees on the live guard's stop)."""
        return self.recorder is not None and (not self.recorder.recording or not self.recorder._closed)

    def guard_stopped(self) -> bool:
        """Whether the live guard stopped the run (a verdict in stop_on): the trainer is to stop now."""
        guard = self.recorder.guard if self.recorder is not None else None
        return guard is not None and guard.stopped is not None

    def reached_max_steps(self, steps_done: int) -> bool:
        """Under a plan with max_steps: whether the trainer should stop now (the recording is then complete)."""
        return self.plan is not None and self.plan.max_steps > 0 and steps_done >= self.plan.max_steps
