"""The live guard: a run judged while it trains, stopped early where asked.

Every `judge_every` recorded steps the Recorder writes its file (a snapshot, status `running`: every step so far) and
the guard judges it against the reference — the partial-run rules of `ampcheck judge`: the run's N steps against the
reference's first N. A decided failure is logged (logger `ampcheck`, level WARNING) with the judge's message, once per
verdict; a verdict named in `stop_on` stops the training: the Recorder writes its file (status `interrupted`, the
note saying why), judges it once more, and then

- a plain loop gets `GuardStop` from `rec.step()` (the `with Recorder(...)` block lets it pass: the file is written);
- the Hugging Face Trainer callback sets `control.should_training_stop`, Lightning's sets `trainer.should_stop`; both
  end the fit cleanly after the step.

    with Recorder("runs/fp16.h5", model, opt, scaler, reference="ref.h5", judge_every=50,
                  stop_on=("nonfinite", "diverges")) as rec:
        ...
    # except ampcheck.GuardStop as stop: stop.judgement.verdict, stop.judgement.message

Cost: nothing on steps not judged (no host sync; a check whether a background judgement has finished); on a judged
step one flush of the pending steps (the recorder's only host sync, which its snapshots make anyway) and the file
written. The judgement itself runs on a background thread (the native judge releases the GIL) while training goes on;
its verdict is taken in at the first step after it finishes (under torch.distributed: at the next judged step, where
all ranks agree), so a stop comes a few steps after the judged step. Two exceptions run it on the training thread: a
judged step whose new rows hold a non-finite loss (a stop must not wait), `judge_in_background=False`, and a process
where h5py is linked to the native core's own HDF5 library (Debian's python3-h5py: the library is not thread-safe; a
wheel of h5py brings its own). One
judgement at a time: a judged step that comes while the previous judgement still runs is passed over (counted in
`Guard.passed_over`). Measured in python/tools/guard_check.py (its table: reports/python/guard.md).

The judgement comes from `ampcheck.judge` (the native core, in-process) where the package has it, else from the
`ampcheck` command (AMPCHECK_BIN or PATH) run on the file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

VERDICTS_THAT_STOP = ("nonfinite", "diverges", "stalls", "error")  # the judge's failing verdicts (`tracks` passes)
# The fewest steps a partial run is judged on: the verdict's smoothing window (harness/verdict/signals.h,
# Tolerance::window; `ampcheck judge` refuses a shorter partial run). Fewer compare a step or two of the run with a band
# that is not measured yet (at step 0 a skip run equals the FP32 run: the band is zero there).
MIN_JUDGED_STEPS = 10
# The provenance attributes a run and its reference must agree on (harness/reference/external_run.cpp,
# check_same_training: only those both carry are compared).
SAME_TRAINING = ("run_key", "model", "model_parameters", "dataset", "reference_key")

logger = logging.getLogger("ampcheck")


@dataclass(frozen=True)
class GuardJudgement:
    """One judgement of the partial run: the verdict (`tracks`, `diverges`, `stalls`, `nonfinite`, `error`), whether
    it tracks the reference (passed), the judge's message, and the number of steps judged."""

    verdict: str
    passed: bool
    message: str
    steps: int


class GuardStop(RuntimeError):
    """Raised by `Recorder.step()` when the live guard stops the run (a verdict in `stop_on`); the file is written
    (status `interrupted`) and judged. `judgement` is that judgement, `path` the file."""

    def __init__(self, path: str, judgement: GuardJudgement, final: GuardJudgement | None = None) -> None:
        super().__init__(
            f"ampcheck: {path}: stopped by the live guard after {judgement.steps} step(s): "
            f"{judgement.verdict}: {judgement.message}"
        )
        self.path = path
        self.judgement = judgement  # the judgement that stopped the run
        self.final = (
            final  # the file written at the stop (status interrupted), judged once more; None if it could not be
        )


JudgeFunction = Callable[[str, str], GuardJudgement]


class Guard:
    """What the Recorder calls at its judged steps. `reference`: the reference file (`ampcheck reference`);
    `judge_every`: judge every N recorded steps (N >= 1); `stop_on`: the verdicts that stop the run; `judge`: a
    function (run path, reference path) -> GuardJudgement, by default the native judge (or the `ampcheck` command)."""

    def __init__(
        self,
        reference: str,
        judge_every: int,
        stop_on: Iterable[str] = (),
        judge: JudgeFunction | None = None,
        background: bool = True,
    ) -> None:
        self.reference, self.judge_every, self.stop_on = check_arguments(reference, judge_every, stop_on)
        self.reference_steps: int | None = None  # the reference's length, once check_reference() has read it
        self._judge = judge or default_judge()
        # the in-process judge reads HDF5 with the native core's library; where h5py is linked to that same library
        # (Debian's python3-h5py; not thread-safe), the judgement runs on the training thread instead
        self.background = background and not (
            getattr(self._judge, "reads_hdf5_in_process", False) and hdf5_shared_with_h5py()
        )
        self._last_error = ""  # the last error a judge raised
        self._steps = 0  # the rows of the file last submitted
        self.judgements: list[GuardJudgement] = []  # every judgement so far, in order
        self.stopped: GuardJudgement | None = None  # the judgement that stopped the run
        self.final: GuardJudgement | None = None  # the judgement of the file written when it stopped
        self.passed_over = 0  # judged steps passed over: the previous background judgement was still running
        self._logged: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: tuple[str, Future[GuardJudgement | Exception]] | None = None

    def check_reference(self, attributes: dict[str, str], model: Any = None) -> None:
        """The reference read and checked against this run before any training (ValueError naming the file, the
        attribute and both values): an HDF5 reference (`ampcheck reference`) with noise runs, of the same training
        (the run's provenance: `attributes`' run_key, dataset, reference_key; the model's class and parameter count),
        whose seed / order noise runs measured noise (not bit-identical to its FP32 run)."""
        run = {k: v for k, v in attributes.items() if k in ("run_key", "dataset", "reference_key")}
        if model is not None:
            run["model"] = type(model).__name__
            run["model_parameters"] = str(sum(p.numel() for p in model.parameters()))
        self.reference_steps = read_reference_facts(self.reference, run)

    def due(self, steps: int) -> bool:
        """Whether the guard judges after this many recorded steps: every judge_every steps, from MIN_JUDGED_STEPS
        on (a partial run shorter than the smoothing window is not judged)."""
        return steps >= MIN_JUDGED_STEPS and steps % self.judge_every == 0

    def submit(self, path: str, urgent: bool = False, steps: int = 0, nonfinite_step: int | None = None) -> None:
        """A judged step: the file at `path` (`steps` rows) judged on the background thread (the verdict taken in by
        `poll()`), or here and now where urgent (new non-finite rows) or not background. A judged step that comes
        while the previous background judgement still runs is passed over. `nonfinite_step`: the first step whose
        loss is not finite, where it is the last step's — with `nonfinite` in stop_on the run stops on it even where the
        judge could not judge."""
        self._steps = steps
        if urgent or not self.background or nonfinite_step is not None:
            self.wait()
            self.judge(path)
            if nonfinite_step is not None and "nonfinite" in self.stop_on and self.stopped is None:
                # the judge could not judge (a failing judge, a run past the reference): the loss decides alone
                self.stopped = GuardJudgement(
                    verdict="nonfinite",
                    passed=False,
                    message=f"loss is not finite at step {nonfinite_step}, the last step recorded (the judge could "
                    f"not judge the run: {self._last_error or 'no verdict'})",
                    steps=steps,
                )
                self.judgements.append(self.stopped)
            return
        if self._inflight is not None:
            if not self._inflight[1].done():
                self.passed_over += 1
                return
            self.poll()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ampcheck-guard")
        self._inflight = (path, self._pool.submit(self._judge_quietly, path))

    def poll(self) -> bool:
        """Take in a finished background judgement (nothing waits; no host sync). True when a stop is now decided."""
        if self._inflight is None or not self._inflight[1].done():
            return False
        path, future = self._inflight
        self._inflight = None
        self._take(path, future.result())
        return self.stopped is not None

    def wait(self) -> None:
        """Wait for the background judgement in flight, if any, and take it in."""
        if self._inflight is not None:
            path, future = self._inflight
            self._inflight = None
            self._take(path, future.result())

    def close(self) -> None:
        """The judgement in flight taken in; the background thread ended."""
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def judge(self, path: str) -> GuardJudgement | None:
        """Judge the file at `path` now; a failure logged once per verdict; a verdict in stop_on remembered. A judge
        that fails (a reference of another training, a missing tool) is logged once and never stops the training."""
        return self._take(path, self._judge_quietly(path))

    def _call_judge(self, path: str) -> GuardJudgement:
        """The judge on the file; a run longer than the reference is judged on the reference's steps (said once)."""
        steps = getattr(self, "_steps", 0)
        if self.reference_steps is not None and steps > self.reference_steps:
            if "past" not in self._logged:
                self._logged.add("past")
                logger.warning(
                    "ampcheck: %s: the run has more steps than the reference %s (%d): the live guard judges its first "
                    "%d (a non-finite loss still stops it)",
                    path,
                    self.reference,
                    self.reference_steps,
                    self.reference_steps,
                )
            if self._judge is command_judge or getattr(self._judge, "takes_steps", False):  # ours: first N steps
                return self._judge(path, self.reference, steps=self.reference_steps)  # type: ignore[call-arg]
        return self._judge(path, self.reference)

    def _judge_quietly(self, path: str) -> GuardJudgement | Exception:
        """The judgement, or the error that stopped it (the background thread's work: nothing logged there)."""
        try:
            return self._call_judge(path)
        except Exception as e:  # noqa: BLE001 (the training goes on; the error is said once, by _take)
            return e

    def _take(self, path: str, j: GuardJudgement | Exception) -> GuardJudgement | None:
        if isinstance(j, Exception):
            self._last_error = str(j)
            if "error" not in self._logged:
                self._logged.add("error")
                logger.warning("ampcheck: %s: the live guard could not judge the run: %s", path, j)
            return None
        self.judgements.append(j)
        if not j.passed and j.verdict not in self._logged:
            self._logged.add(j.verdict)
            logger.warning(
                "ampcheck: %s: after %d step(s) the live guard judges the run %s: %s",
                path,
                j.steps,
                j.verdict,
                j.message,
            )
        if not j.passed and j.verdict in self.stop_on and self.stopped is None:
            self.stopped = j
        return j

    def judge_final(self, path: str) -> GuardJudgement | None:
        """Judge the file the stop wrote (status interrupted): `final`, not counted among the judgements; None where
        the judge could not (the stop stands: it was decided by `stopped`)."""
        j = self._judge_quietly(path)
        self.final = None if isinstance(j, Exception) else j
        return self.final


def check_arguments(reference: Any, judge_every: Any, stop_on: Iterable[str]) -> tuple[str, int, tuple[str, ...]]:
    """The guard's arguments checked (an error naming the argument and what was expected), before any training."""
    path = os.fspath(reference)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path}: the reference file (reference=) does not exist. HINT: build it with "
            f"`ampcheck reference FP32_RUN --spread ...` before training"
        )
    if isinstance(judge_every, bool) or not isinstance(judge_every, int) or judge_every < 1:
        raise ValueError(f"judge_every={judge_every!r}: must be an integer >= 1 (judge every N steps)")
    stop: tuple[str, ...] = (stop_on,) if isinstance(stop_on, str) else tuple(stop_on)
    for verdict in stop:
        if verdict not in VERDICTS_THAT_STOP:
            raise ValueError(
                f"stop_on={stop!r}: {verdict!r} is not a failing verdict; expected some of "
                f"{', '.join(VERDICTS_THAT_STOP)}"
            )
    return path, judge_every, stop


def default_judge() -> JudgeFunction:
    """`ampcheck.judge` in-process where the package has its native core (the reference read once), else the
    `ampcheck` command."""
    import ampcheck

    available = getattr(ampcheck, "native_available", None)
    if available is None or not available():
        return command_judge
    return NativeJudge()


class NativeJudge:
    """The in-process judge: `ampcheck.judge` on the Recorder's own snapshot (read in-process: written_here), each
    reference loaded once."""

    __name__ = "native"
    reads_hdf5_in_process = True
    takes_steps = True

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}

    def __call__(self, run: str, reference: str, steps: int | None = None) -> GuardJudgement:
        import ampcheck

        if reference not in self._loaded:
            self._loaded[reference] = ampcheck.load_reference(reference)
        j = ampcheck.judge(run, self._loaded[reference], steps=steps, written_here=True)  # the Recorder's snapshot
        return GuardJudgement(
            verdict=str(j.verdict), passed=str(j.verdict) == "tracks", message=str(j.message), steps=int(j.steps)
        )


def read_reference_facts(path: str, run: dict[str, str]) -> int:
    """The reference's step count, after checking it is one (HDF5, noise runs), of this run's training (`run`: the
    run's provenance attributes) and that its seed / order noise runs are not bit-identical to its FP32 run — the
    checks `ampcheck judge` makes, made before the training instead of at the first judged step. ValueError naming the
    file and what was expected."""
    try:
        import h5py
        import numpy as np
    except ImportError:  # a recorder writing JSON lines on a machine without h5py: the judge checks at its first call
        return 0
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(
            f"{path}: the reference (reference=) is not an HDF5 file ({e}). HINT: build it with "
            f"`ampcheck reference FP32_RUN --spread ...`"
        ) from None
    with f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()}
        if "steps" not in f or "loss" not in f["steps"] or "noise" not in f or not len(f["noise"]):
            raise ValueError(
                f"{path}: not an ampcheck reference (expected /steps/loss and the noise runs under /noise, as "
                f"`ampcheck reference` writes them). HINT: build it with `ampcheck reference FP32_RUN --spread ...`"
            )
        for key in SAME_TRAINING:
            mine, theirs = run.get(key, ""), attrs.get(key, "")
            if mine and theirs and mine != theirs:
                raise ValueError(
                    f"{path}: the reference's {key} is {theirs!r}, this run's is {mine!r}: not the same training. "
                    f"HINT: pass a reference built from FP32 runs of this model and data (`ampcheck reference`)"
                )
        base = f["steps"]
        for label in f["noise"]:
            if not (label.startswith("seed") or label.startswith("order")):
                continue
            run_ = f["noise"][label]
            same = all(
                c in run_
                and base[c].shape == run_[c].shape
                and np.array_equal(base[c][()], run_[c][()], equal_nan=True)
                for c in base
                if c != "step_time_ms"
            )
            if same and len(base["loss"]):
                what = "the other init seed" if label.startswith("seed") else "the other data order"
                raise ValueError(
                    f"{path}: noise run {label!r} is bit-identical to the FP32 run at every step: {what} never reached "
                    f"the training, so the reference measures no noise and a correct run would be stopped. HINT: "
                    f"record that run again with the seed taken by the training (seed after creating the Recorder, "
                    f"or from the command line) and rebuild the reference with `ampcheck reference`"
                )
        return int(base["loss"].shape[0])


def hdf5_libraries(maps: str) -> set[str]:
    """The HDF5 libraries (not the high-level ones) mapped into a process, from its /proc/<pid>/maps text."""
    libs = set()
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        name = os.path.basename(path)
        if name.startswith("libhdf5") and ".so" in name and not name.startswith("libhdf5_hl") and "_hl" not in name:
            libs.add(path)
    return libs


def hdf5_shared_with_h5py() -> bool:
    """Whether h5py and the native core use one HDF5 library in this process (then it is not safe to read from a
    second thread). A wheel of h5py brings its own (h5py.libs/), so two are mapped; one, or no way to tell: shared."""
    try:
        import h5py  # noqa: F401 (mapped now, if it is to be)

        with open("/proc/self/maps") as f:
            return len(hdf5_libraries(f.read())) < 2
    except (ImportError, OSError):
        return True


def command_judge(run: str, reference: str, steps: int | None = None) -> GuardJudgement:
    """`ampcheck judge RUN --reference REF --out TMP [--first-steps N]` (AMPCHECK_BIN, else `ampcheck` on PATH): its
    summary.json."""
    binary = os.environ.get("AMPCHECK_BIN") or shutil.which("ampcheck")
    if not binary:
        raise FileNotFoundError(
            "the live guard needs the ampcheck judge: neither the package's native core nor an "
            "`ampcheck` command (AMPCHECK_BIN, PATH) was found. HINT: pip install ./python, or "
            "set AMPCHECK_BIN to the built tool"
        )
    out = tempfile.mkdtemp(prefix=".ampcheck-guard-", dir=os.path.dirname(os.path.abspath(run)))
    try:
        r = subprocess.run(
            [binary, "judge", run, "--reference", reference, "--out", os.path.join(out, "j")]
            + (["--first-steps", str(steps)] if steps else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        summary = os.path.join(out, "j", "summary.json")
        if not os.path.exists(summary):
            lines = [x for x in r.stdout.splitlines() if x.strip()]
            raise RuntimeError(
                f"{run}: ampcheck judge failed (exit {r.returncode}): {lines[-1] if lines else 'no output'}"
            )
        with open(summary) as f:
            row = json.load(f)["scenarios"][0]
        return GuardJudgement(
            verdict=str(row["verdict"]),
            passed=str(row["verdict"]) == "tracks",
            message=str(row.get("message") or row.get("why") or ""),
            steps=int(row.get("steps", 0)),
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
