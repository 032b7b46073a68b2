"""The Recorder's options — its keyword arguments — as one typed object, each documented once, with their checks
(python/src/ampcheck/recorder.py; docs/TRAJECTORY_FORMAT.md, "Writing it from PyTorch", says more of each)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ampcheck.guard import Guard, JudgeFunction
from ampcheck.under_plan import UnderPlan

PERTURBATIONS = ("none", "ulp", "seed", "order", "skip")  # the values of the attribute perturbation
DEFAULT_PROBE_EVERY = 10  # grads, update and parameter norms every 10th step: <= 2% of a GPU step (python/README.md)


@dataclasses.dataclass(frozen=True)
class RecorderOptions:
    """Recorder(path, model, optimizer, scaler, **options): every keyword argument, as given (`Recorder.options`)."""

    attributes: Mapping[str, object] | None = None
    """The run's attributes (str(value) each) written into the file: run_key, strategy, dataset ...; a sweep plan's
    attributes win over them, and what the recorder measures (grad_scaler, param_dtype ...) wins over both."""
    probe_every: int = DEFAULT_PROBE_EVERY
    """Grads, update and parameter norms every N steps (>= 0; 0: never)."""
    flush_every: int = 50
    """The pending steps copied to the host every N steps (>= 1): the only host sync the recorder makes."""
    overwrite: bool = False
    """An existing file at the path is replaced (else FileExistsError at construction)."""
    perturbation: str | None = None
    """The noise run this is, one of PERTURBATIONS ('none': the FP32 reference run itself); the attribute
    perturbation, which must agree with attributes['perturbation'] where both are given."""
    snapshot_every: int | None = None
    """The file rewritten (status `running`) every N recorded steps (>= 0; 0: no snapshots; None: flush_every)."""
    skip_first_step: bool = False
    """The optimizer's first step not taken: the `skip` noise run (needs the optimizer; perturbation 'skip')."""
    track_nonfinite: bool | None = None
    """The first non-finite module / step / pass tracked (nonfinite.py; None: under a sweep plan only)."""
    under_plan: UnderPlan | None = None
    """The sweep's plan as an integration applied it (None: the Recorder applies AMPCHECK_PLAN's plan itself)."""
    reference: str | os.PathLike[str] | None = None
    """The live guard's reference file (`ampcheck reference`): the run is judged against it as it trains."""
    judge_every: int = 50
    """The live guard judges the partial run every N recorded steps (>= 1)."""
    stop_on: Sequence[str] = ()
    """The verdicts that stop the run (e.g. ("nonfinite", "diverges")): the recording ends, status `interrupted`."""
    judge: JudgeFunction | None = None
    """The live guard's judge (run path, reference path) -> GuardJudgement (None: the native judge, or the command)."""
    stop_raises: bool = True
    """The guard's stop raises GuardStop from step() (False: the integrations stop their trainer instead)."""
    per_rank: bool = False
    """Under torch.distributed every rank records its own file (runs/x.h5 -> runs/x.rank<R>.h5); else rank 0 only."""
    judge_in_background: bool = True
    """The guard's judgement on a background thread (False: on the training thread)."""

    def guard(self) -> Guard | None:
        """The live guard, its arguments checked (None without a reference)."""
        if self.reference is None:
            return None
        return Guard(os.fspath(self.reference), self.judge_every, self.stop_on, self.judge, self.judge_in_background)

    def checked_snapshot_every(self) -> int:
        """probe_every, flush_every and snapshot_every checked; the snapshot interval in effect."""
        if self.probe_every < 0 or self.flush_every < 1:
            raise ValueError("probe_every must be >= 0 (0: never) and flush_every >= 1")
        snapshot_every = self.flush_every if self.snapshot_every is None else self.snapshot_every
        if snapshot_every < 0:
            raise ValueError("snapshot_every must be >= 0 (0: no snapshots)")
        return snapshot_every

    def perturbation_outside_a_plan(self, optimizer: Any) -> str | None:
        """The perturbation recorded by a run under no plan: skip_first_step's 'skip' (checked), else the one given."""
        if not self.skip_first_step:
            return self.perturbation
        if optimizer is None:
            raise ValueError("skip_first_step=True needs the optimizer (Recorder(..., optimizer=...))")
        if self.perturbation not in (None, "skip"):
            raise ValueError(f"skip_first_step=True records perturbation 'skip', not {self.perturbation!r}")
        return "skip"

    def recorded_attributes(self, under_plan: UnderPlan | None, perturbation: str | None) -> dict[str, str]:
        """The attributes the recording starts from: the caller's, the plan's over them (and no perturbation of the
        caller's: the plan's), the perturbation checked against PERTURBATIONS and against attributes['perturbation']."""
        attributes = self.attributes
        if under_plan is not None:  # the plan's attributes win over the script's
            attributes = dict(attributes or {})
            attributes.update(under_plan.plan.attributes(under_plan.applied))
            perturbation = None
        recorded = {k: str(v) for k, v in (attributes or {}).items()}
        for given in (recorded.get("perturbation"), perturbation):
            if given is not None and str(given) not in PERTURBATIONS:
                raise ValueError(
                    f"perturbation {str(given)!r}: must be one of 'none' (the FP32 reference run "
                    f"itself), 'ulp', 'seed', 'order', 'skip' (a noise run of that kind)"
                )
        if perturbation is not None:
            if recorded.get("perturbation", str(perturbation)) != str(perturbation):
                raise ValueError(
                    f"perturbation={perturbation!r} and attributes['perturbation']="
                    f"{recorded['perturbation']!r} disagree"
                )
            recorded["perturbation"] = str(perturbation)
        return recorded
