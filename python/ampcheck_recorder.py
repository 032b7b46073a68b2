"""ampcheck's recorder for PyTorch-Python training loops.

Records a training run in ampcheck's trajectory format (docs/TRAJECTORY_FORMAT.md, format `ampcheck-trajectory`
version 1) so that `ampcheck judge RUN --reference REF` can compare it, signal by signal, with an FP32 reference
built by `ampcheck reference FP32_RUN --spread RUN...`. Depends on torch and (for .h5 files) h5py only.

    from ampcheck_recorder import Recorder

    with Recorder("runs/fp16.h5", model=model, optimizer=optimizer, scaler=scaler,
                  attributes={"strategy": "fp16-autocast-scaler", "run_key": "my-model-v3"}) as rec:
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).loss
            scaler.scale(loss).backward()
            rec.after_backward()          # optional: grads as backward produced them (before unscale_ / clipping)
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            rec.step(loss)                # once per optimizer step, before scheduler.step()

What is recorded per step (the columns of ampcheck's own engine):
  loss                   the loss passed to step() (unscaled; averaged over micro-batches if you pass that)
  lr                     the optimizer's first param group's lr as the optimizer step ran (needs optimizer)
  skipped                1 if the optimizer did not step (GradScaler found inf/NaN), from an optimizer step hook
  loss_scale             the scale this step's backward used (1 without an enabled GradScaler)
  grad_norm, frac_zero_grad, frac_subnormal_grad, frac_nonfinite_grad
                         of the model's gradients; with after_backward(): as backward produced them (scaled; the norm
                         divided by the scale), else as step() finds them (after unscale_ and any clipping)
  update_norm            2-norm of the parameters' change by the optimizer step (a parameter snapshot is taken in an
                         optimizer step pre-hook on probe steps; 0 on a skipped step)
  param_norm             2-norm of the parameters after the step (probe steps and the last step)
  step_time_ms           wall time from the previous step() (the first: from the Recorder's creation); on CUDA
                         measured with CUDA events, read at flush time
  eval_loss              step(loss, eval_loss=...) where given
Columns the recorder could not measure (no model, no optimizer) are left out of the file, and `ampcheck judge` names
them as not judged. Nothing forces a host sync per step: values stay on the loss's device and are copied to the host
every `flush_every` steps. Grad and update probes run every `probe_every` steps (NaN between).

The file is written once, atomically (a temporary file in the same directory, then a rename), when the Recorder
closes: at the end of the `with` block, on close(), on an exception leaving the `with` block (status `error`, the
exception's message — PyTorch's own text —, the failed step's partial row dropped, the exception re-raised), or at
interpreter exit after an uncaught exception. An existing file is refused at construction unless overwrite=True.
"""

import atexit
import json
import math
import os
import platform
import sys
import time
import weakref
from datetime import datetime, timezone

import torch

FORMAT = "ampcheck-trajectory"
FORMAT_VERSION = "1"
COLUMNS = ("loss", "grad_norm", "param_norm", "update_norm", "loss_scale", "skipped", "frac_zero_grad",
           "frac_subnormal_grad", "frac_nonfinite_grad", "lr", "step_time_ms", "eval_loss")
_DEVICE_COLUMNS = ("loss", "grad_norm", "param_norm", "update_norm", "loss_scale", "skipped", "frac_zero_grad",
                   "frac_subnormal_grad", "frac_nonfinite_grad")

_open_recorders = weakref.WeakSet()
_uncaught = []
_atexit_registered = False


def _excepthook(exc_type, exc, tb):  # remember an uncaught exception for the recorders still open at exit
    _uncaught.append(exc)
    _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = sys.excepthook
sys.excepthook = _excepthook


def _close_open_recorders():  # registered on the first Recorder, after h5py's own exit handler (atexit is LIFO)
    for rec in list(_open_recorders):
        exc = _uncaught[-1] if _uncaught else None
        rec._finish(exc if exc is not None else RuntimeError("the process exited before Recorder.close()"))


class Recorder:
    def __init__(self, path, model=None, optimizer=None, scaler=None, *, attributes=None, probe_every=1,
                 flush_every=50, overwrite=False):
        self.path = os.fspath(path)
        if not (self.path.endswith(".h5") or self.path.endswith(".hdf5") or self.path.endswith(".jsonl")):
            raise ValueError(f"{self.path}: the trajectory file must end in .h5, .hdf5 (HDF5) or .jsonl (JSON lines)")
        if self._hdf5():
            import h5py  # noqa: F401  (fail now, not after the training)
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"{self.path}: directory {parent} does not exist")
        if os.path.exists(self.path) and not overwrite:
            raise FileExistsError(f"{self.path}: exists; refusing to overwrite it (pass overwrite=True)")
        if probe_every < 0 or flush_every < 1:
            raise ValueError("probe_every must be >= 0 (0: never) and flush_every >= 1")
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.probe_every, self.flush_every = probe_every, flush_every
        self.attributes = {k: str(v) for k, v in (attributes or {}).items()}
        self.rows = []          # finished host rows: dict column -> float
        self._pending = []      # (device row tensor, host dict, timing mark) not yet copied to the host
        self._measured = {"loss", "step_time_ms"}
        self._step = 0
        self._closed = False
        self._cuda = None       # decided on the first step() by the loss's device
        self._last_mark = self._mark_cpu()
        self._grad_probe = None
        self._scale_used = None
        self._next_scale = self._current_scale()  # the scale the next step's backward uses (update() ran before)
        self._stepped = False
        self._found_inf = None
        self._snapshot = None
        self._lr = math.nan
        self._hooks = []
        self._param_list = None
        self._buffers = None    # the parameter snapshot, reused from probe to probe
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._pre_step))
            self._measured.update(("lr", "skipped"))
        if model is not None:
            self._measured.add("param_norm")
            if probe_every:
                self._measured.update(("grad_norm", "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad"))
                if optimizer is not None:
                    self._measured.add("update_norm")
        if self._scaler_on():
            self._measured.add("loss_scale")
        global _atexit_registered
        if not _atexit_registered:
            atexit.register(_close_open_recorders)
            _atexit_registered = True
        _open_recorders.add(self)

    # -- the loop's calls -----------------------------------------------------------------------------------------

    def after_backward(self):
        """Optional, after the last backward of the step and before unscale_ / clipping: probe the gradients as
        backward produced them (ampcheck's engine probes there)."""
        self._scale_used = self._current_scale()
        if self.model is not None and self._probe_step():
            self._grad_probe = self._grad_stats(self._scale_used)

    def step(self, loss, eval_loss=None):
        """Once per optimizer step, after optimizer.step() / scaler.step() + scaler.update()."""
        if self._closed:
            raise RuntimeError(f"{self.path}: the recorder is closed")
        loss_t = loss.detach().reshape(()) if torch.is_tensor(loss) else torch.tensor(float(loss), dtype=torch.float64)
        dev = loss_t.device
        if self._cuda is None:
            self._cuda = dev.type == "cuda"
        lr = self._lr if self._stepped else (float(self.optimizer.param_groups[0]["lr"]) if self.optimizer else math.nan)
        host = dict.fromkeys(_DEVICE_COLUMNS, math.nan)  # host values; device values are listed in `cols`/`vals`
        host.update(lr=lr, eval_loss=float(eval_loss) if eval_loss is not None else math.nan)
        cols, vals = ["loss"], [loss_t.to(torch.float64)]
        if self._scaler_on():
            scale = self._scale_used if self._scale_used is not None else self._next_scale
            cols.append("loss_scale")
            vals.append(scale.to(dev, torch.float64).reshape(()))
        if self.optimizer is not None:
            if self._found_inf is not None:  # a fused optimizer: GradScaler calls step() and the kernel skips
                cols.append("skipped")
                vals.append((self._found_inf.to(dev, torch.float64).reshape(()) > 0).double())
            else:
                host["skipped"] = 0.0 if self._stepped else 1.0
        if self.model is not None and self._probe_step():  # grads, update and parameter norms
            params = self._params()
            with torch.no_grad():
                stats = self._grad_probe if self._grad_probe is not None else self._grad_stats(None)
                for k, v in stats.items():
                    cols.append(k)
                    vals.append(v.to(dev, torch.float64).reshape(()))
                if self.optimizer is not None:
                    if self._snapshot is not None:
                        cols.append("update_norm")
                        vals.append(_norm(torch._foreach_sub(params, self._snapshot)).to(dev))
                    elif not self._stepped:
                        host["update_norm"] = 0.0
                cols.append("param_norm")
                vals.append(_norm(params).to(dev))
        if eval_loss is not None:
            self._measured.add("eval_loss")
        self._pending.append((cols, torch.stack(vals), host, self._mark()))
        self._step += 1
        self._grad_probe, self._scale_used, self._snapshot, self._stepped, self._lr = None, None, None, False, math.nan
        self._found_inf = None
        self._next_scale = self._current_scale()
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self):
        """Copy the pending steps to the host (one device->host copy; the only sync the recorder makes)."""
        if not self._pending:
            return
        values = torch.cat([p[1] for p in self._pending]).cpu().tolist()
        i = 0
        for cols, _, host, mark in self._pending:
            r = dict(host)
            r.update(zip(cols, values[i:i + len(cols)]))
            i += len(cols)
            r["step_time_ms"] = self._elapsed_ms(self._last_mark, mark)
            self._last_mark = mark
            self.rows.append(r)
        self._pending.clear()

    def close(self):
        """Write the file (status completed)."""
        self._finish(None)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._finish(exc)
        return False  # an exception goes on up: the recorder only records it

    # -- internals ------------------------------------------------------------------------------------------------

    def _hdf5(self):
        return not self.path.endswith(".jsonl")

    def _scaler_on(self):
        return self.scaler is not None and self.scaler.is_enabled()

    def _probe_step(self):
        return self.probe_every > 0 and self._step % self.probe_every == 0

    def _params(self):
        if self._param_list is None:  # the Parameter objects stay the same through .to() / .half()
            self._param_list = list(self.model.parameters())
        return [p.detach() for p in self._param_list]

    def _current_scale(self):
        if not self._scaler_on():
            return torch.ones((), dtype=torch.float64)
        s = getattr(self.scaler, "_scale", None)  # the device tensor GradScaler keeps (created on first scale())
        if s is None:
            return torch.tensor(float(getattr(self.scaler, "_init_scale", self.scaler.get_scale())), dtype=torch.float64)
        return s.detach().clone().reshape(())

    def _pre_step(self, optimizer, args, kwargs):  # optimizer step pre-hook: the step is taken (not skipped)
        self._stepped = True
        self._lr = float(optimizer.param_groups[0]["lr"])
        found_inf = getattr(optimizer, "found_inf", None)  # GradScaler.step sets it for a fused optimizer
        if torch.is_tensor(found_inf):
            self._found_inf = found_inf.detach().clone()
        if self.model is not None and self._probe_step():
            with torch.no_grad():
                params = self._params()
                if self._buffers is None or any(b.shape != p.shape or b.dtype != p.dtype or b.device != p.device
                                                for b, p in zip(self._buffers, params)):
                    self._buffers = [p.clone() for p in params]
                else:
                    torch._foreach_copy_(self._buffers, params)
                self._snapshot = self._buffers

    def _grad_stats(self, scale):
        self._params()
        grads = [p.grad.detach() for p in self._param_list if p.grad is not None]
        if not grads:
            nan = torch.full((), math.nan, dtype=torch.float64)
            return {k: nan for k in ("grad_norm", "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad")}
        dev = grads[0].device
        with torch.no_grad():
            norm = _norm(grads)
            if scale is not None:
                norm = norm / scale.to(dev, torch.float64)
            zero = sub = nonfinite = torch.zeros((), dtype=torch.float64, device=dev)
            by_dtype = {}
            for g in grads:
                by_dtype.setdefault(g.dtype, []).append(g.reshape(-1))
            n = 0
            for dtype, flats in by_dtype.items():  # one vector per dtype, three counting passes
                flat = flats[0] if len(flats) == 1 else torch.cat(flats)
                info = torch.finfo(dtype)
                n_zero = flat.numel() - torch.count_nonzero(flat)  # NaN is non-zero
                mag = flat.abs()
                zero = zero + n_zero
                sub = sub + torch.count_nonzero(mag < info.tiny) - n_zero
                nonfinite = nonfinite + (flat.numel() - torch.count_nonzero(mag <= info.max))  # NaN fails <=
                n += flat.numel()
        n = max(n, 1)
        return {"grad_norm": norm, "frac_zero_grad": zero / n, "frac_subnormal_grad": sub / n,
                "frac_nonfinite_grad": nonfinite / n}

    def _mark_cpu(self):
        return ("cpu", time.perf_counter())

    def _mark(self):
        if self._cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            if self._last_mark[0] == "cpu":  # the first CUDA mark: time up to here is host time
                return ("cuda", ev, time.perf_counter())
            return ("cuda", ev, None)
        return self._mark_cpu()

    @staticmethod
    def _elapsed_ms(a, b):
        if b[0] == "cpu" or a[0] == "cpu":
            return (b[-1] - a[-1]) * 1e3 if b[-1] is not None and a[-1] is not None else math.nan
        b[1].synchronize()
        return a[1].elapsed_time(b[1])

    def _finish(self, exc):
        if self._closed:
            return
        self._closed = True
        _open_recorders.discard(self)
        for h in self._hooks:
            h.remove()
        try:
            self.flush()
        except Exception as e:  # the device may be unusable after the error: keep the steps flushed before
            exc = exc or e
            self._pending.clear()
        if exc is not None:
            self._pending.clear()
        elif self.model is not None and self.rows and math.isnan(self.rows[-1]["param_norm"]):
            with torch.no_grad():  # the final parameters, whatever probe_every
                self.rows[-1]["param_norm"] = float(_norm(self._params()))
        attrs = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "recorder": "ampcheck_recorder 1",
            "status": "error" if exc is not None else "completed",
            "error": _error_text(exc) if exc is not None else "",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch_version": torch.__version__.split("+")[0],
        }
        attrs.update(_device_attributes(self._cuda))
        if self.model is not None:
            attrs["model"] = type(self.model).__name__
            attrs["model_parameters"] = str(sum(p.numel() for p in self.model.parameters()))
        if self.optimizer is not None:
            attrs["optimizer"] = type(self.optimizer).__name__
        if self._scaler_on():
            attrs["scaler"] = (f"GradScaler(init_scale={self.scaler._init_scale}, growth_interval="
                               f"{self.scaler._growth_interval})")
        attrs.update(self.attributes)
        if exc is not None:
            attrs["failed_step"] = str(len(self.rows))
        _write_atomically(self.path, self.rows, [c for c in COLUMNS if c in self._measured], attrs)


def _norm(tensors):
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm([t.float() for t in tensors])).double())


def _error_text(exc):
    text = str(exc)
    if isinstance(exc, KeyError):  # str(KeyError('x')) is "'x'"
        text = repr(exc)
    return text.split("\n\n")[0] if text else type(exc).__name__


def _device_attributes(cuda):
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        return {"device_name": torch.cuda.get_device_name(), "device_class": f"cuda-sm{major}{minor}"}
    return {"device_name": platform.processor() or platform.machine(), "device_class": "cpu"}


def _write_atomically(path, rows, columns, attrs):
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        if path.endswith(".jsonl"):
            with open(tmp, "w") as f:
                f.write(json.dumps({"format": FORMAT, "format_version": int(FORMAT_VERSION),
                                    "attributes": {k: v for k, v in attrs.items()
                                                   if k not in ("format", "format_version")}}) + "\n")
                for s, r in enumerate(rows):
                    obj = {"step": s}
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
