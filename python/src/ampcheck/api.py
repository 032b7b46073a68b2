"""ampcheck's judge, reference and validation in this process: the functions the `ampcheck` command's `judge`,
`reference` and `validate` run (harness/usecases, through the extension module ampcheck._native), with typed results.
One implementation: a Judgement's verdict, margin and message are the command's, exactly (CTest cpu.python_package
compares them).

    import ampcheck
    ampcheck.make_reference("runs/fp32.h5", spread=["seed:runs/fp32-seed.h5", "skip:runs/fp32-skip.h5"],
                            out="ref.h5")
    j = ampcheck.judge("runs/fp16.h5", "ref.h5")
    print(j.verdict, j.margin, j.message)           # tracks 0.61 "tracks the FP32 reference ..."

    ref = ampcheck.load_reference("ref.h5")         # read once, judge often: a run in progress, its first N steps
    j = ampcheck.judge("runs/fp16.h5", ref, steps=200)

Errors (a file that does not follow the format, a run of another training, an output that exists) raise
ampcheck.AmpcheckError with the command's message, which names the file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, Callable, Union

from ampcheck._errors import AmpcheckError
from ampcheck._loader import native, native_available

PathLike = Union[str, "os.PathLike[str]"]
VERDICTS = ("tracks", "diverges", "stalls", "nonfinite", "error")

__all__ = [
    "AmpcheckError",
    "Judgement",
    "JudgementWarning",
    "SignalComparison",
    "Reference",
    "ReferenceInfo",
    "SuiteResult",
    "judge",
    "load_reference",
    "make_reference",
    "validate",
    "native_available",
    "VERDICTS",
]


def _number(v: Any) -> float:
    """A summary number: JSON null (not computed) reads as NaN, as summary.json's reader does."""
    return math.nan if v is None else float(v)


@dataclasses.dataclass(frozen=True)
class SignalComparison:
    """One signal's comparison with the reference (summary.json's `signals[]`): at its worst step `max_step`, the run's
    deviation from the reference against what FP32's own noise allows; `max_margin` = |deviation| / allowed."""

    name: str  # loss | grad_norm | update_norm | zero_grads | subnormal_grads | nonfinite_grads | skipped
    unit: str  # nats | log-ratio | fraction | steps | share
    judged: bool
    fired: bool  # beyond its allowance
    decides: bool  # a firing sets the verdict (else a warning)
    verdict: str  # what a firing means
    first_step: int
    max_step: int
    max_margin: float
    deviation: float
    allowed: float
    noise: float
    run_value: float
    reference_value: float
    message: str

    @staticmethod
    def from_row(s: dict[str, Any]) -> SignalComparison:
        return SignalComparison(
            name=s["name"],
            unit=s.get("unit", ""),
            judged=bool(s.get("judged")),
            fired=bool(s.get("fired")),
            decides=bool(s.get("decides", True)),
            verdict=s.get("verdict", ""),
            first_step=int(s.get("first_step", -1)),
            max_step=int(s.get("max_step", -1)),
            max_margin=_number(s.get("max_margin")),
            deviation=_number(s.get("deviation")),
            allowed=_number(s.get("allowed")),
            noise=_number(s.get("noise")),
            run_value=_number(s.get("run_value")),
            reference_value=_number(s.get("reference_value")),
            message=s.get("message", ""),
        )


@dataclasses.dataclass(frozen=True)
class JudgementWarning:
    """A finding that did not set the verdict: a diagnostic beyond its allowance while the outcomes track, a column
    never measured, mixed precision not in effect, a partial run."""

    signal: str
    message: str


@dataclasses.dataclass(frozen=True)
class Judgement:
    """One run judged against its reference: `ampcheck judge`'s row for it (summary.json's fields)."""

    run: str  # the file judged
    name: str  # its row's name (the file's stem)
    verdict: str  # tracks | diverges | stalls | nonfinite | error
    expect: str  # the expected verdict (expect=, else the file's `expect`, else tracks)
    passed: bool  # the verdict is the expected one (and, with strict, no warning)
    message: str  # the verdict's sentence, as the command prints it
    deciding_signal: str  # the signal that set a verdict other than tracks ("" when tracking)
    margin: float  # the largest signal margin, deviation / allowed (summary.json max_deviation_bands)
    max_signal: str  # the signal with that margin
    first_divergence_step: int
    steps: int  # steps judged
    skipped_steps: int
    partial: bool  # judged as a partial run (steps=, or a snapshot of a run still going / killed)
    strategy: str
    signals: tuple[SignalComparison, ...]
    warnings: tuple[JudgementWarning, ...]
    final_loss_ratio: float
    first_loss: float
    final_loss: float
    row: dict[str, Any] = dataclasses.field(repr=False, compare=False)  # the whole summary.json row

    @staticmethod
    def from_row(run: str, r: dict[str, Any]) -> Judgement:
        warnings = tuple(JudgementWarning(w["signal"], w.get("message", "")) for w in r.get("warnings", []))
        return Judgement(
            run=run,
            name=r["name"],
            verdict=r["verdict"],
            expect=r["expect"],
            passed=bool(r["pass"]),
            message=r.get("message", ""),
            deciding_signal=r.get("deciding_signal", ""),
            margin=_number(r.get("max_deviation_bands")),
            max_signal=r.get("max_signal", ""),
            first_divergence_step=int(r.get("first_divergence_step", -1)),
            steps=int(r.get("steps", 0)),
            skipped_steps=int(r.get("skipped_steps", 0)),
            partial=any(w.signal == "partial" for w in warnings),
            strategy=r.get("strategy", ""),
            signals=tuple(SignalComparison.from_row(s) for s in r.get("signals", [])),
            warnings=warnings,
            final_loss_ratio=_number(r.get("final_loss_ratio")),
            first_loss=_number(r.get("first_loss")),
            final_loss=_number(r.get("final_loss")),
            row=r,
        )


@dataclasses.dataclass(frozen=True)
class ReferenceInfo:
    """What make_reference wrote: the file, its steps and its noise runs' labels (seed, order, skip, ulp+1, ...)."""

    path: str
    steps: int
    noise_labels: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SuiteResult:
    """What validate returns, as `ampcheck validate` prints it: one row per scenario (its Judgement-like row in
    `rows`, summary.json's fields), where the run directory was published, the notes below the table."""

    skipped: str  # non-empty: nothing ran, and why (the command's exit 77)
    written: bool
    reports_dir: str
    notes: tuple[str, ...]
    passed: int
    failed: int
    exit_code: int  # the command's: 0 all passed, 1 a failure, 77 skipped
    rows: tuple[dict[str, Any], ...]


class Reference:
    """A reference file read and checked once (it has noise runs): judge many runs, or one run many times, against it
    without reading it again."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @property
    def path(self) -> str:
        return str(self._handle.path)

    @property
    def steps(self) -> int:
        return int(self._handle.steps)

    @property
    def noise_labels(self) -> tuple[str, ...]:
        return tuple(self._handle.noise_labels)

    def __repr__(self) -> str:
        return f"Reference({self.path!r}, steps={self.steps}, noise={list(self.noise_labels)})"


def _path(name: str, value: Any) -> str:
    """A path argument as str, or AmpcheckError naming the argument and what was expected (never pybind11's
    "incompatible function arguments")."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise AmpcheckError(f"{name}={value!r}: expected a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise AmpcheckError(f"{name}={value!r}: expected True or False, got {type(value).__name__}")
    return value


def _text(name: str, value: Any) -> str:
    if value is not None and not isinstance(value, str):
        raise AmpcheckError(f"{name}={value!r}: expected a string or None, got {type(value).__name__}")
    return value or ""


def _count(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise AmpcheckError(f"{name}={value!r}: expected a whole number, at least {least}")
    return value


def load_reference(path: PathLike) -> Reference:
    """Reads and checks a reference (`ampcheck reference`'s or `ampcheck record`'s file), for judge()."""
    return Reference(native().load_reference(_path("path", path)))


def judge(
    run: PathLike,
    reference: PathLike | Reference,
    *,
    expect: str | None = None,
    strategy: str | None = None,
    steps: int | None = None,
    strict: bool = False,
    written_here: bool = False,
) -> Judgement:
    """Judges one recorded run against a reference, as `ampcheck judge RUN --reference REF` does — the same verdict,
    margin and message — writing nothing.

    expect: the verdict the run should get (tracks | diverges | stalls | nonfinite | error); None: the file's
    `expect` attribute, else tracks. strategy: the strategy shown (None: the file's). steps: judge only the run's
    first `steps` steps, as a partial run against the reference's first as many (`ampcheck judge --first-steps`);
    a run file with fewer rows is judged on the rows it has. strict: a warning fails the run (`--strict`).
    written_here: the run file was written by this process (the live guard's snapshots): read in-process, not in the
    forked reader that contains a malformed file's crash — a fork copies a large training process's page tables."""
    if expect is not None and expect not in VERDICTS:
        raise AmpcheckError(f"expect={expect!r}: expected one of {', '.join(VERDICTS)}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise AmpcheckError(f"steps={steps!r}: expected a whole number of steps, at least 1 (or None: every step)")
    path, strategy_text = _path("run", run), _text("strategy", strategy)
    strict, written_here = _flag("strict", strict), _flag("written_here", written_here)
    ref = reference if isinstance(reference, Reference) else load_reference(_path("reference", reference))
    row = json.loads(native().judge(path, ref._handle, expect or "", strategy_text, steps or 0, strict, written_here))
    return Judgement.from_row(path, row)


def make_reference(
    fp32_run: PathLike, spread: Sequence[PathLike], out: PathLike, *, force: bool = False
) -> ReferenceInfo:
    """Builds a reference from your FP32 run and the runs that measure FP32's own spread, as `ampcheck reference
    FP32_RUN --spread [KIND:]FILE... --out OUT` does: each spread run is [KIND:]FILE, KIND seed | order | skip | ulp
    (default: the file's `perturbation` attribute). An existing `out` is replaced only with force=True."""
    if isinstance(spread, (str, bytes, os.PathLike)) or not isinstance(spread, (list, tuple)):
        raise AmpcheckError(f"spread={spread!r}: expected a list of [KIND:]FILE runs")
    runs = [_path(f"spread[{i}]", s) for i, s in enumerate(spread)]
    r = native().make_reference(_path("fp32_run", fp32_run), runs, _path("out", out), _flag("force", force))
    return ReferenceInfo(path=str(r["path"]), steps=int(r["steps"]), noise_labels=tuple(r["noise_labels"]))


def _print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


def validate(
    out: PathLike = "reports/latest",
    *,
    scenarios: Sequence[str] | None = None,
    suite: str | None = None,
    device: str | None = None,
    references: PathLike | None = None,
    steps: int | None = None,
    plants: Sequence[str] = (),
    replays: int = 3,
    force: bool = False,
    log: Callable[[str], None] | None = _print_line,
) -> SuiteResult:
    """Validates this machine's numerics, as `ampcheck validate` does: the validation suite (or `scenarios`) trained
    and compared with its goldens — bit for bit where the stack matches, statistically elsewhere — with faults
    planted on request (`plants`, `--plant`). Writes the run directory `out` (an existing one only with force=True);
    progress lines go to `log` (None: silent)."""
    if isinstance(scenarios, str) or isinstance(plants, str):
        raise AmpcheckError("scenarios / plants: expected a list of names, got a single string")
    names = [_text(f"scenarios[{i}]", x) for i, x in enumerate(scenarios or [])]
    planted = [_text(f"plants[{i}]", x) for i, x in enumerate(plants)]
    if log is not None and not callable(log):
        raise AmpcheckError(f"log={log!r}: expected a function of one line (str), or None")
    r = json.loads(
        native().validate(
            names,
            _text("suite", suite),
            _text("device", device),
            _path("references", references) if references else "",
            _path("out", out),
            _count("steps", steps, 1) if steps is not None else 0,
            _flag("force", force),
            planted,
            _count("replays", replays, 1),
            log,
        )
    )
    return SuiteResult(
        skipped=r["skipped"],
        written=bool(r["written"]),
        reports_dir=r["reports_dir"],
        notes=tuple(r["notes"]),
        passed=int(r["passed"]),
        failed=int(r["failed"]),
        exit_code=int(r["exit_code"]),
        rows=tuple(r["scenarios"]),
    )
