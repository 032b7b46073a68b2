"""The trajectory file written whole (python/src/ampcheck/recorder.py's file): atomically (a temporary file in the same
directory, then a rename; HDF5 or JSON lines), and every open Recorder written at SIGTERM (status `interrupted`,
before the signal's previous handler runs) and at interpreter exit (`error` after an uncaught exception, else
`completed` with a note). A signal that arrives while a file is being written is handled right after the write."""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import sys
import threading
import weakref
from types import FrameType, TracebackType
from typing import Any

FORMAT = "ampcheck-trajectory"
FORMAT_VERSION = "1"
# the per-step columns, in the file's order (docs/TRAJECTORY_FORMAT.md); the first nine are computed on the device
COLUMNS = (
    "loss",
    "grad_norm",
    "param_norm",
    "update_norm",
    "loss_scale",
    "skipped",
    "frac_zero_grad",
    "frac_subnormal_grad",
    "frac_nonfinite_grad",
    "lr",
    "step_time_ms",
    "eval_loss",
)

_open_recorders: weakref.WeakSet[Any] = weakref.WeakSet()  # the Recorders not closed yet
_uncaught: list[BaseException] = []
_atexit_registered = False


def _excepthook(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:  # remember an uncaught exception for the recorders still open at exit
    _uncaught.append(exc)
    _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = sys.excepthook
sys.excepthook = _excepthook


def _close_open_recorders() -> None:  # registered on the first Recorder, after h5py's own exit handler (atexit is LIFO)
    for rec in list(_open_recorders):
        exc = _uncaught[-1] if _uncaught else None
        # no exception: the loop ended without close() — a completed run if its last step was recorded (step() ran
        # after the last optimizer step), said in the note
        rec._finish(
            exc,
            note=None
            if exc is not None
            else f"closed at interpreter exit: Recorder.close() was not called; {rec._step} step(s) recorded",
        )


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a scheduler's preemption or time limit, `kill`): every open recorder writes what it has, status
    `interrupted`, then the previous handler runs (the default one ends the process with the signal)."""
    if _writing[0]:  # a file is being written (a snapshot): handle the signal right after it, not inside HDF5
        _deferred_signal[0] = signum
        return
    name = signal.Signals(signum).name
    for rec in list(_open_recorders):
        try:
            rec._finish(None, status="interrupted", note=f"interrupted by {name} after {rec._step} step(s)")
        except Exception:  # noqa: BLE001 (a signal handler must not raise for one recorder's sake)
            pass
    previous = _previous_sigterm[0]
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_previous_sigterm: list[Any] = [None]
_writing = [0]  # files being written now (a signal arriving then is handled after the write)
_deferred_signal: list[int | None] = [None]


def _install_sigterm() -> None:
    """On the first Recorder made in the main thread: chain our SIGTERM handler in front of the current one."""
    if _previous_sigterm[0] is not None or threading.current_thread() is not threading.main_thread():
        return
    try:
        _previous_sigterm[0] = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not settable here (an embedded interpreter)
        _previous_sigterm[0] = None


def register_open(recorder: Any) -> None:
    """A Recorder made: written at SIGTERM and at interpreter exit unless closed before (forget_open)."""
    global _atexit_registered
    _install_sigterm()
    if not _atexit_registered:
        atexit.register(_close_open_recorders)
        _atexit_registered = True
    _open_recorders.add(recorder)


def forget_open(recorder: Any) -> None:
    """A Recorder closed: nothing left to write for it at SIGTERM or exit."""
    _open_recorders.discard(recorder)


def error_text(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError):  # str(KeyError('x')) is "'x'"
        text = repr(exc)
    return text.split("\n\n")[0] if text else type(exc).__name__


def write_atomically(path: str, rows: list[dict[str, float]], columns: list[str], attrs: dict[str, str]) -> None:
    _writing[0] += 1
    try:
        _write_atomically_now(path, rows, columns, attrs)
    finally:
        _writing[0] -= 1
    if _writing[0] == 0 and _deferred_signal[0] is not None:
        signum, _deferred_signal[0] = _deferred_signal[0], None
        _on_sigterm(signum, None)


def _write_atomically_now(path: str, rows: list[dict[str, float]], columns: list[str], attrs: dict[str, str]) -> None:
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        if path.endswith(".jsonl"):
            with open(tmp, "w") as f:
                f.write(
                    json.dumps(
                        {
                            "format": FORMAT,
                            "format_version": int(FORMAT_VERSION),
                            "attributes": {k: v for k, v in attrs.items() if k not in ("format", "format_version")},
                        }
                    )
                    + "\n"
                )
                for s, r in enumerate(rows):
                    obj: dict[str, float | None] = {"step": s}
                    obj.update({c: (r[c] if math.isfinite(r[c]) else None) for c in columns})
                    f.write(json.dumps(obj) + "\n")
                f.flush()
                os.fsync(f.fileno())
        else:
            import h5py
            import numpy as np

            with h5py.File(tmp, "w") as f:
                for k, v in attrs.items():
                    f.attrs[k] = v
                steps = f.create_group("steps")
                for c in columns:
                    steps.create_dataset(c, data=np.array([r[c] for r in rows], dtype=np.float64))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def check_path(path: str, overwrite: bool) -> None:
    """The file a Recorder is to write, checked before any training: its suffix (.h5 / .hdf5: HDF5, h5py importable
    now rather than after the training; .jsonl: JSON lines), its directory, and no file there unless overwrite."""
    if not (path.endswith(".h5") or path.endswith(".hdf5") or path.endswith(".jsonl")):
        raise ValueError(f"{path}: the trajectory file must end in .h5, .hdf5 (HDF5) or .jsonl (JSON lines)")
    if not path.endswith(".jsonl"):
        import h5py  # noqa: F401  (fail now, not after the training)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{path}: directory {parent} does not exist")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path}: exists; refusing to overwrite it (pass overwrite=True)")
