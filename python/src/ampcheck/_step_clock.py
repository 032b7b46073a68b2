"""The recorder's step_time_ms: the time from one step() to the next — CUDA events on a GPU (read when the rows are
flushed to the host: no sync per step), the wall clock on the CPU (python/src/ampcheck/recorder.py)."""

from __future__ import annotations

import math
import time
from typing import Any

import torch

Mark = tuple[Any, ...]  # ("cpu", perf_counter) | ("cuda", event, perf_counter or None)


class StepClock:
    def __init__(self) -> None:
        self.cuda: bool | None = None  # decided on the first step() by the loss's device
        self._last: Mark = self._cpu_mark()  # the mark of the last step flushed (the first: when recording began)

    @staticmethod
    def _cpu_mark() -> Mark:
        return ("cpu", time.perf_counter())

    def mark(self) -> Mark:
        """This step's mark, taken at step()."""
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            if self._last[0] == "cpu":  # the first CUDA mark: time up to here is host time
                return ("cuda", ev, time.perf_counter())
            return ("cuda", ev, None)
        return self._cpu_mark()

    def elapsed_ms(self, mark: Mark) -> float:
        """The step's time, from the last step flushed to `mark` (steps are flushed in order)."""
        a, self._last = self._last, mark
        if mark[0] == "cpu" or a[0] == "cpu":
            return (mark[-1] - a[-1]) * 1e3 if mark[-1] is not None and a[-1] is not None else math.nan
        mark[1].synchronize()
        return float(a[1].elapsed_time(mark[1]))
