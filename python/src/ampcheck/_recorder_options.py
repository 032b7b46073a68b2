"""The Recorder's options — its keyword arguments — as one typed object, each documented once and checked once, when
the object is made (python/src/ampcheck/recorder.py; docs/TRAJECTORY_FORMAT.md, "Writing it from PyTorch", says more
of each). `Recorder(path, model, optimizer, scaler, options=RecorderOptions(...))` and `Recorder(..., probe_every=...)`
are the same recording; RecorderKeywords spells the same fields for type checkers (a test keeps the two alike)."""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from ampcheck.guard import Guard, JudgeFunction, check_arguments
from ampcheck.under_plan import UnderPlan

PERTURBATIONS = ("none", "ulp", "seed", "order", "skip")  # the values of the attribute perturbation
DEFAULT_PROBE_EVERY = 10  # grads, update and parameter norms every 10th step: <= 2% of a GPU step (python/README.md)


@dataclasses.dataclass(frozen=True)
class RecorderOptions:
    """Recorder(path, model, optimizer, scaler, **options): every keyword argument, as given (`Recorder.options`).
    Made with a bad value, it raises ValueError naming the field (the live guard's reference that does not exist:
    FileNotFoundError); dataclasses.replace(options, probe_every=1) makes another, checked again."""

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

    def __post_init__(self) -> None:
        """Each option checked on its own, and skip_first_step with perturbation; the live guard's (judge_every,
        stop_on, the reference file) where a reference is given. What needs the run as well (the optimizer for
        skip_first_step, the path, the reference against the run) the Recorder checks when it is made."""
        at_least("probe_every", self.probe_every, 0, "0: never")
        at_least("flush_every", self.flush_every, 1, "the steps copied to the host at once")
        if self.snapshot_every is not None:
            at_least("snapshot_every", self.snapshot_every, 0, "0: no snapshots; None: flush_every")
        check_perturbation(self.perturbation)
        if self.skip_first_step and self.perturbation not in (None, "skip"):
            raise ValueError(f"skip_first_step=True records perturbation 'skip', not {self.perturbation!r}")
        if self.reference is not None:
            check_arguments(self.reference, self.judge_every, self.stop_on)

    @classmethod
    def given(cls, options: RecorderOptions | None, keywords: Mapping[str, Any]) -> RecorderOptions:
        """The options a Recorder was given: `options=` or the loose keywords, never both (TypeError naming both);
        a keyword that is no option is the TypeError Python gives for an unexpected keyword argument."""
        unknown = [name for name in keywords if name not in _FIELDS]
        if unknown:
            raise TypeError(f"Recorder.__init__() got an unexpected keyword argument {unknown[0]!r}")
        if options is None:
            return cls(**keywords)
        if not isinstance(options, RecorderOptions):
            raise TypeError(f"options={options!r}: expected a RecorderOptions or None, got {type(options).__name__}")
        if keywords:
            loose = ", ".join(f"{name}=" for name in keywords)
            raise TypeError(
                f"Recorder(options=..., {loose}): the options are given either as options= or as keywords, not both "
                f"(HINT: dataclasses.replace(options, {loose}...) makes the options with those changed)"
            )
        return options

    def guard(self) -> Guard | None:
        """The live guard, its arguments checked (None without a reference)."""
        if self.reference is None:
            return None
        return Guard(os.fspath(self.reference), self.judge_every, self.stop_on, self.judge, self.judge_in_background)

    def snapshot_interval(self) -> int:
        """The snapshot interval in effect: snapshot_every, or flush_every where it is None."""
        return self.flush_every if self.snapshot_every is None else self.snapshot_every

    def perturbation_outside_a_plan(self, optimizer: Any) -> str | None:
        """The perturbation recorded by a run under no plan: skip_first_step's 'skip' (checked), else the one given."""
        if not self.skip_first_step:
            return self.perturbation
        if optimizer is None:
            raise ValueError("skip_first_step=True needs the optimizer (Recorder(..., optimizer=...))")
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
        check_perturbation(recorded.get("perturbation"))
        if perturbation is not None:
            if recorded.get("perturbation", str(perturbation)) != str(perturbation):
                raise ValueError(
                    f"perturbation={perturbation!r} and attributes['perturbation']="
                    f"{recorded['perturbation']!r} disagree"
                )
            recorded["perturbation"] = str(perturbation)
        return recorded


_FIELDS = frozenset(field.name for field in dataclasses.fields(RecorderOptions))


class RecorderKeywords(TypedDict, total=False):
    """RecorderOptions' fields as the Recorder's keyword arguments (`**keywords: Unpack[RecorderKeywords]`), for type
    checkers; each documented in RecorderOptions (tests/test_recorder.py checks the two name the same fields)."""

    attributes: Mapping[str, object] | None
    probe_every: int
    flush_every: int
    overwrite: bool
    perturbation: str | None
    snapshot_every: int | None
    skip_first_step: bool
    track_nonfinite: bool | None
    under_plan: UnderPlan | None
    reference: str | os.PathLike[str] | None
    judge_every: int
    stop_on: Sequence[str]
    judge: JudgeFunction | None
    stop_raises: bool
    per_rank: bool
    judge_in_background: bool


def at_least(field: str, value: Any, least: int, meaning: str) -> None:
    """ValueError naming the field unless value is a whole number (int, numpy's) >= least; True / False are not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{field}={value!r}: must be a whole number >= {least} ({meaning})")


def check_perturbation(given: object) -> None:
    """ValueError unless `given` (the perturbation, or the attribute perturbation) is None or one of PERTURBATIONS."""
    if given is not None and str(given) not in PERTURBATIONS:
        raise ValueError(
            f"perturbation {str(given)!r}: must be one of 'none' (the FP32 reference run "
            f"itself), 'ulp', 'seed', 'order', 'skip' (a noise run of that kind)"
        )
