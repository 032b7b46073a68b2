"""ampcheck's recorder for PyTorch-Python training loops.

Records a training run in ampcheck's trajectory format (docs/TRAJECTORY_FORMAT.md, format `ampcheck-trajectory`
version 1) so that `ampcheck judge RUN --reference REF` can compare it, signal by signal, with an FP32 reference
built by `ampcheck reference FP32_RUN --spread RUN...`. Depends on torch and (for .h5 files) h5py only.

    from ampcheck_recorder import Recorder

    with Recorder("runs/fp16.h5", model=model, optimizer=optimizer, scaler=scaler,
                  attributes={"strategy": "fp16-autocast-scaler", "run_key": "my-model-v3"}) as rec:
        for step in range(steps):
            mean_loss = 0.0
            for x in micro_batches(step):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x).loss / accumulation_steps
                scaler.scale(loss).backward()    # the recorder's grad hooks read the grads here
                mean_loss += loss.detach()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            rec.step(mean_loss)                  # once per optimizer step, before the next backward

Where the calls go. The gradients are read by hooks (Tensor.register_post_accumulate_grad_hook on every parameter
that requires grad, registered when the Recorder is made): on probe steps each backward leaves, per parameter, the
statistics of its .grad right after backward accumulated into it, and a later micro-batch's backward replaces them —
so step() sees the grads the optimizer steps with, before unscale_, clipping and zero_grad, divided by the loss scale
the backward used. step() may therefore sit anywhere after the optimizer step of the iteration and before the next
iteration's backward: before or after optimizer.zero_grad() (set_to_none or not), before or after the scheduler.
Pass the GradScaler whenever one scales the loss: without it the recorder cannot divide the scaled grads by the scale.
after_backward() is needed only where a loop sets .grad without backward, or changes .grad between backward and
unscale_ (e.g. divides it by the accumulation steps itself), or runs under DistributedDataParallel (the hooks see each
rank's own grads before the all-reduce): call it after the last backward (and that change, or the all-reduce) and
before unscale_ / clipping; it reads every .grad then and takes precedence for that step. A parameter whose .grad
was set without backward (no hook fired) and is not None at step() is read at step(), as it is then. Every backward
through the model since the previous step() counts, a parameter's entry coming from the last one that reached it — so
make the Recorder after a warm-up backward whose grads are thrown away, or call after_backward() in that step.
To spare the earlier micro-batches, whose grads the next backward replaces, a hook measures only from the previous
step's number of backward passes on (every pass on the first step); a step with fewer passes than the previous one is
read at step() where its grads are unchanged since their last backward (same tensor, same version counter), else its
grad columns are NaN (warned once, counted in steps_without_grads) — where the number of micro-batches varies and the
loop unscales, clips or zeroes the grads before step(), call after_backward() after the last backward.

What is recorded per step (the columns of ampcheck's own engine):
  loss                   the loss passed to step() (unscaled; averaged over micro-batches if you pass that)
  lr                     the optimizer's first param group's lr as the optimizer step ran (needs optimizer)
  skipped                1 if the optimizer did not step (GradScaler found inf/NaN), from an optimizer step hook
  loss_scale             the scale this step's backward used (1 without an enabled GradScaler)
  grad_norm, frac_zero_grad, frac_subnormal_grad, frac_nonfinite_grad
                         of the model's gradients as the step's last backward left them (the hooks; with
                         after_backward(): as it found them), before unscale_ and clipping; the norm is divided by
                         the loss scale, the fractions are of the scaled grads' elements
  update_norm            2-norm of the parameters' change by the optimizer step (a parameter snapshot is taken in an
                         optimizer step pre-hook on probe steps; 0 on a skipped step)
  param_norm             2-norm of the parameters after the step (probe steps and the last step)
  step_time_ms           wall time from the previous step() (the first: from the Recorder's creation); on CUDA
                         measured with CUDA events, read at flush time
  eval_loss              step(loss, eval_loss=...) where given
Columns the recorder could not measure (no model, no optimizer) are left out of the file, and `ampcheck judge` names
them as not judged. Nothing forces a host sync per step: values stay on the loss's device and are copied to the host
every `flush_every` steps. Grad and update probes run every `probe_every` steps (NaN between).

If a probe step finds no gradient at all (no backward through the model since the previous step(), no
after_backward(), every .grad None) its grad columns are NaN, the file's attribute `steps_without_grads` counts it, and
the first such step warns (warnings.warn, UserWarning): "ampcheck_recorder: step N: no gradients seen at step() ...".
A step whose grads were changed before the hooks measured them (above) warns once "ampcheck_recorder: step N: this
step ran fewer backward passes (micro-batches) than the previous one, ..." and is counted there too.
Under torch.distributed with more than one process, the first step whose grads the hooks read warns too ("... the
grads were read by the backward hooks, which see this rank's own grads, before DistributedDataParallel's all-reduce:
call rec.after_backward() ...").

Root attributes the recorder adds (besides provenance):
  grad_probe             where the grads were read: `backward-hooks`, `after_backward` or `at_step` (several, most
                         common first, joined by ","; `none` if no probe step found a grad); with a model and probes
  steps_without_grads    the number of probe steps whose grads could not be read (see above), their grad columns
                         NaN; with a model and probes
  param_dtype            the parameters' dtypes at the first step(), sorted and joined by "," (`float32`,
                         `bfloat16,float32`); with a model
  autocast_dtype         `float16`, `bfloat16` or `none`: whether autocast was on, and its dtype, for the device type
                         of the model's first parameter during the first forward run with grad enabled (else the
                         first forward) among the model's first 16 calls; `unknown` if the model never ran forward;
                         with a model
  grad_scaler            `enabled` / `disabled` (a GradScaler was passed) or `none`
  perturbation           Recorder(..., perturbation=...): `none` (the FP32 reference run itself), `ulp`, `seed`,
                         `order` or `skip` (a noise run for `ampcheck reference`; `skip`: the FP32 loop with its first
                         optimizer.step() not taken, as a GradScaler skips an overflowing step — the recorder marks
                         that step skipped); written only when given
nudge_ulp(model, +1 / -1) moves every floating parameter one ulp, for `ulp` runs.
skip_first_step=True makes the `skip` noise run itself: the optimizer's first step() is not taken (perturbation `skip`).

Under `ampcheck sweep` (AMPCHECK_PLAN set; docs/USING.md, "The sweep's environment contract") the Recorder records at
the plan's `record` path (not the one given), with the attributes plan_run, plan_strategy, plan_applied, perturbation,
workload, modules and device, and tracks the first non-finite module / step / pass (nonfinite.py; also with
track_nonfinite=True outside a plan). Made with no integration's `under_plan`, it applies the plan to this model and
optimizer itself by hooks (under_plan.py, plan_hooks.py: parameter dtype, autocast around the model's forward, a
GradScaler applied in the backward and the optimizer's step, the skipped first step, keep_fp32 modules, TF32, the seed
offset) — a plain loop opts in with nothing but the Recorder — and once the plan's max_steps steps are recorded it
writes the file (complete) and ends the process with SystemExit(0). A plan it cannot apply is written as the error run
(plan_applied `refused: <why>`) and the process ends (SystemExit with that message).

The file is always whole: it is written atomically (a temporary file in the same directory, then a rename) — every
snapshot_every recorded steps (default: flush_every, 50) with every step so far and status `running`, so a run killed
outright (SIGKILL, the OOM killer) leaves a readable file up to its last snapshot; on SIGTERM (a scheduler's
preemption or time limit) with status `interrupted` and every step recorded, before the signal's previous handler runs;
and when the Recorder closes: at the end of the `with` block, on close(), on an exception leaving the `with` block
(status `error`, the exception's message — PyTorch's own text —, the failed step's partial row dropped, the exception
re-raised), at interpreter exit after an uncaught exception (`error`), or at interpreter exit without close()
(`completed`, with a `note` saying so). `ampcheck judge` judges a `running` or `interrupted` run on the steps it has,
as a partial run. An existing file is refused at construction unless overwrite=True.
"""

import atexit
import functools
import json
import math
import os
import platform
import signal
import sys
import threading
import time
import warnings
import weakref
from datetime import datetime, timezone

import torch

from ampcheck.nonfinite import NonfiniteTracker
from ampcheck.plan import current_plan, module_table
from ampcheck.plan_hooks import StepWrapper
from ampcheck.under_plan import PlanRefused, apply_to_loop

FORMAT = "ampcheck-trajectory"
FORMAT_VERSION = "1"
COLUMNS = ("loss", "grad_norm", "param_norm", "update_norm", "loss_scale", "skipped", "frac_zero_grad",
           "frac_subnormal_grad", "frac_nonfinite_grad", "lr", "step_time_ms", "eval_loss")
_DEVICE_COLUMNS = ("loss", "grad_norm", "param_norm", "update_norm", "loss_scale", "skipped", "frac_zero_grad",
                   "frac_subnormal_grad", "frac_nonfinite_grad")
_GRAD_COLUMNS = ("grad_norm", "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad")
GRAD_PROBES = ("backward-hooks", "after_backward", "at_step")  # the values of the attribute grad_probe (and `none`)
PERTURBATIONS = ("none", "ulp", "seed", "order", "skip")  # the values of the attribute perturbation
_FORWARDS_LOOKED_AT = 16  # the forward pre-hook looks at this many forwards at most, then removes itself

_open_recorders = weakref.WeakSet()
_uncaught = []
_atexit_registered = False


def _excepthook(exc_type, exc, tb):  # remember an uncaught exception for the recorders still open at exit
    _uncaught.append(exc)
    _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = sys.excepthook
sys.excepthook = _excepthook


def unwrap_optimizer(optimizer):
    """The torch optimizer inside a framework's wrapper — accelerate's AcceleratedOptimizer (`.optimizer`, itself an
    Optimizer subclass whose hooks never fire), Lightning's LightningOptimizer (`._optimizer`) — or the optimizer."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            inner = getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            return optimizer
        optimizer = inner
    return optimizer


def _close_open_recorders():  # registered on the first Recorder, after h5py's own exit handler (atexit is LIFO)
    for rec in list(_open_recorders):
        exc = _uncaught[-1] if _uncaught else None
        # no exception: the loop ended without close() — a completed run if its last step was recorded (step() ran
        # after the last optimizer step), said in the note
        rec._finish(exc, note=None if exc is not None else
                    f"closed at interpreter exit: Recorder.close() was not called; {rec._step} step(s) recorded")


def _on_sigterm(signum, frame):
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


_previous_sigterm = [None]
_writing = [0]            # files being written now (a signal arriving then is handled after the write)
_deferred_signal = [None]


def _install_sigterm():
    """On the first Recorder made in the main thread: chain our SIGTERM handler in front of the current one."""
    if _previous_sigterm[0] is not None or threading.current_thread() is not threading.main_thread():
        return
    try:
        _previous_sigterm[0] = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not settable here (an embedded interpreter)
        _previous_sigterm[0] = None


class Recorder:
    def __init__(self, path, model=None, optimizer=None, scaler=None, *, attributes=None, probe_every=1,
                 flush_every=50, overwrite=False, perturbation=None, snapshot_every=None, skip_first_step=False,
                 track_nonfinite=None, under_plan=None):
        self.path = os.fspath(path)
        # a sweep plan (AMPCHECK_PLAN): the plan's path, and its precision applied here when no integration did
        plan = under_plan.plan if under_plan is not None else current_plan()
        if plan is not None:
            self.path = plan.record
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            if under_plan is None:
                under_plan, scaler = apply_to_loop(plan, model, optimizer, scaler, skip_first=skip_first_step)
        elif skip_first_step:
            if optimizer is None:
                raise ValueError("skip_first_step=True needs the optimizer (Recorder(..., optimizer=...))")
            if perturbation not in (None, "skip"):
                raise ValueError(f"skip_first_step=True records perturbation 'skip', not {perturbation!r}")
            perturbation = "skip"
        self._under_plan = under_plan
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
        snapshot_every = flush_every if snapshot_every is None else snapshot_every
        if snapshot_every < 0:
            raise ValueError("snapshot_every must be >= 0 (0: no snapshots)")
        self.snapshot_every = snapshot_every
        self._snapshot_rows = 0  # rows in the last snapshot written
        wrapped = optimizer
        optimizer = unwrap_optimizer(optimizer) if optimizer is not None else None
        self._skipper = None
        if skip_first_step and plan is None:  # the first optimizer step not taken: the `skip` noise run
            self._skipper = StepWrapper(optimizer, skip_first=True, scaler=None)
        if under_plan is not None:  # the plan's attributes win over the script's
            attributes = dict(attributes or {})
            attributes.update(under_plan.plan.attributes(under_plan.applied))
            perturbation = None
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.probe_every, self.flush_every = probe_every, flush_every
        self.attributes = {k: str(v) for k, v in (attributes or {}).items()}
        if optimizer is not wrapped:  # the hooks go on the torch optimizer that steps; the wrapper is named
            self.attributes.setdefault("optimizer_wrapper", type(wrapped).__name__)
        for given in (self.attributes.get("perturbation"), perturbation):
            if given is not None and str(given) not in PERTURBATIONS:
                raise ValueError(f"perturbation {str(given)!r}: must be one of 'none' (the FP32 reference run "
                                 f"itself), 'ulp', 'seed', 'order', 'skip' (a noise run of that kind)")
        if perturbation is not None:
            if self.attributes.get("perturbation", str(perturbation)) != str(perturbation):
                raise ValueError(f"perturbation={perturbation!r} and attributes['perturbation']="
                                 f"{self.attributes['perturbation']!r} disagree")
            self.attributes["perturbation"] = str(perturbation)
        self.rows = []          # finished host rows: dict column -> float
        self._pending = []      # (device row tensor, host dict, timing mark) not yet copied to the host
        self._measured = {"loss", "step_time_ms"}
        self._step = 0
        self._closed = False
        self._cuda = None       # decided on the first step() by the loss's device
        self._last_mark = self._mark_cpu()
        self._ab_entries = None  # after_backward()'s _grad_entry() per parameter with a grad
        self._scale_used = None
        self._next_scale = self._current_scale()  # the scale the next step's backward uses (update() ran before)
        self._stepped = False
        self._found_inf = None
        self._snapshot = None
        self._lr = math.nan
        self._hooks = []
        self._param_list = None
        self._buffers = None    # the parameter snapshot, reused from probe to probe
        self._entries = {}      # parameter index -> _grad_entry() of its grad, left by the grad hooks on a probe step
        self._deferred = {}     # parameter index -> (weakref to its grad, the grad's version) at a hook not measuring
        self._fires = {}        # parameter index -> its grad hook's calls since the last step() (backward passes)
        self._expected = {}     # the same, of the previous step: from which call on a hook measures
        self._backward_seen = False  # a grad hook fired since the last step()
        self._hook_scale = None      # the loss scale at the step's first grad hook (the step's backward's)
        self._grad_probes = {}       # grad_probe value -> probe steps read that way
        self._steps_without_grads = 0
        self._warned_distributed = self._warned_lost = self._warned_no_grads = False
        self._param_dtype = None     # decided on the first step()
        self._autocast = None        # (autocast dtype name, from a forward with grad enabled) from the pre-hook
        self._forwards = 0
        self._forward_hook = None
        if optimizer is not None and not hasattr(optimizer, "register_step_pre_hook"):
            warnings.warn(f"ampcheck_recorder: {type(wrapped).__name__} is not a torch.optim.Optimizer and holds none "
                          f"(no .optimizer / ._optimizer): the recorder cannot see its steps — lr, skipped and "
                          f"update_norm are not recorded (pass the torch optimizer inside it)", stacklevel=2)
            self.optimizer = optimizer = None
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._pre_step))
            self._measured.update(("lr", "skipped"))
        if model is not None:
            self._measured.add("param_norm")
            self._params()
            # on the submodules with parameters of their own: they run inside the model's forward, where a framework's
            # autocast wrapper of model.forward (accelerate's prepare_model) is in effect — a hook on the model itself
            # runs before that wrapper and would see autocast off. All of them, as the first one need not run (T5's
            # `shared` embedding: the encoder calls its own embed_tokens); the first to run decides, then all go.
            owners = [m for m in model.modules() if m is not model and any(True for _ in m.parameters(False))]
            self._forward_hook = [m.register_forward_pre_hook(self._on_forward) for m in owners or [model]]
            self._hooks.extend(self._forward_hook)
            if probe_every:
                self._measured.update(_GRAD_COLUMNS)
                if optimizer is not None:
                    self._measured.add("update_norm")
                for i, p in enumerate(self._param_list):
                    if p.requires_grad:  # (a frozen parameter unfrozen later is read at step())
                        self._hooks.append(p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, i)))
        if self._scaler_on():
            self._measured.add("loss_scale")
        self._grads_unscaled = bool(getattr(scaler, "grads_unscaled_in_backward", False))
        self._nonfinite = None
        if model is not None and (track_nonfinite or (track_nonfinite is None and under_plan is not None)):
            self._nonfinite = NonfiniteTracker(model)
            self._hooks.extend(self._nonfinite.handles)
        if under_plan is not None and model is not None:
            self.attributes["modules"] = module_table(model)
        _install_sigterm()
        global _atexit_registered
        if not _atexit_registered:
            atexit.register(_close_open_recorders)
            _atexit_registered = True
        _open_recorders.add(self)
        if under_plan is not None and under_plan.refused:  # the error run, then the process ends
            self._finish(PlanRefused(f"plan {plan.run} ({plan.strategy}): {under_plan.applied}"))
            raise SystemExit(f"ampcheck: {self.path}: plan {plan.run} ({plan.strategy}) {under_plan.applied}")

    # -- the loop's calls -----------------------------------------------------------------------------------------

    def after_backward(self):
        """Optional: probe every .grad now, in place of the grad hooks' reading, for this step. Only for a loop that
        sets .grad without backward, changes .grad between backward and unscale_, or runs under DDP (the hooks see
        each rank's grads before the all-reduce); call it after the last backward (and that change) and before
        unscale_ / clipping. The norm is divided by the scaler's current scale."""
        self._scale_used = self._current_scale()
        if self.model is not None and self._probe_step():
            entries = [_grad_entry(p.grad) for p in self._param_list if p.grad is not None]
            self._ab_entries = entries or None  # no grad at all: the hooks' or step()'s reading stands

    def step(self, loss, eval_loss=None):
        """Once per optimizer step, after optimizer.step() / scaler.step() (and scaler.update()), before the next
        backward; before or after optimizer.zero_grad() and scheduler.step()."""
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
            scale = next(s for s in (self._scale_used, self._hook_scale, self._next_scale) if s is not None)
            cols.append("loss_scale")
            vals.append(scale.to(dev, torch.float64).reshape(()))
        if self.optimizer is not None:
            if self._found_inf is not None:  # a fused optimizer: GradScaler calls step() and the kernel skips
                cols.append("skipped")
                vals.append((self._found_inf.to(dev, torch.float64).reshape(()) > 0).double())
            else:
                host["skipped"] = 0.0 if self._stepped else 1.0
        if self.model is not None and self._param_dtype is None:
            self._param_dtype = self._dtypes()
        if self.model is not None and self._probe_step():  # grads, update and parameter norms
            params = self._params()
            with torch.no_grad():
                stats = self._step_grad_stats(dev)  # None: no gradient at all (the columns stay NaN)
                if stats is not None:
                    cols.extend(_GRAD_COLUMNS)
                    vals.extend(stats)
                if self.optimizer is not None:
                    if self._snapshot is not None:
                        cols.append("update_norm")
                        vals.append(_norm(torch._foreach_sub(params, self._snapshot)).to(dev))
                    elif not self._stepped:
                        host["update_norm"] = 0.0
                cols.append("param_norm")
                vals.append(_norm(params).to(dev))
        if self._nonfinite is not None:
            cols.extend(("_nonfinite_forward", "_nonfinite_backward"))
            vals.extend(self._nonfinite.collect(dev))
        if eval_loss is not None:
            self._measured.add("eval_loss")
        self._pending.append((cols, torch.stack(vals), host, self._mark()))
        self._step += 1
        self._ab_entries, self._scale_used, self._snapshot, self._stepped, self._lr = None, None, None, False, math.nan
        self._found_inf = None
        self._entries, self._deferred, self._backward_seen, self._hook_scale = {}, {}, False, None
        if self._fires:
            self._expected, self._fires = self._fires, {}
        self._next_scale = self._current_scale()
        snapshot_due = self.snapshot_every and self._step - self._snapshot_rows >= self.snapshot_every
        if len(self._pending) >= self.flush_every or snapshot_due:
            self.flush()
        if snapshot_due:
            self._snapshot_if_due()
        plan = self._under_plan.plan if self._under_plan is not None else None
        if plan is not None and plan.max_steps and self._step >= plan.max_steps:
            self._finish(None, note=f"stopped at the plan's max_steps ({plan.max_steps})")
            if self._under_plan.exit_at_max_steps:
                raise SystemExit(0)  # a plain loop: the run is recorded and complete; the script ends here

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
            if "_nonfinite_forward" in r:
                self._nonfinite.seen(len(self.rows), r.pop("_nonfinite_forward"), r.pop("_nonfinite_backward"))
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

    def _model_device(self):
        """The device of the model's first parameter now (a Trainer may have moved it after the Recorder was made)."""
        p = next(self.model.parameters(), None) if self.model is not None else None
        return p.device if p is not None else torch.device("cpu")

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

    def _on_grad(self, i, param):  # post-accumulate-grad hook of parameter i: after backward wrote its .grad
        if not self._backward_seen:  # the step's first backward: the scale it uses (update() runs after the backward)
            self._backward_seen = True
            if self._scaler_on():
                self._hook_scale = self._current_scale()
        n = self._fires[i] = self._fires.get(i, 0) + 1
        if self._probe_step() and not self._closed:
            g = param.grad
            if g is None:
                return
            if n >= self._expected.get(i, 1):  # maybe the step's last backward: measure now (a later one replaces it)
                self._entries[i] = _grad_entry(g)
                self._deferred.pop(i, None)
            else:  # the previous step had more backward passes (micro-batches): a later one will come, or step()
                self._deferred[i] = (weakref.ref(g), g._version)  # reads this grad if nothing changed it since

    def _on_forward(self, module, args):  # forward pre-hook: the autocast state of the first (training) forward
        self._forwards += 1
        training = torch.is_grad_enabled()
        if self._autocast is None or (training and not self._autocast[1]):
            dev = self._param_list[0].device.type if self._param_list else "cpu"
            self._autocast = (_autocast_dtype(dev), training)
        if training or self._forwards >= _FORWARDS_LOOKED_AT * len(self._forward_hook):  # (calls of every hooked module)
            for h in self._forward_hook:
                h.remove()

    def _step_grad_stats(self, dev):
        """The step's grad columns as 0-d float64 tensors on dev, or None (no gradient to read: warned, counted)."""
        lost = set()
        if self._ab_entries is not None:
            parts, probe = [(self._ab_entries, self._scale_used)], "after_backward"
        else:
            hooked = list(self._entries.values())
            for i, (ref, version) in self._deferred.items():  # fewer backward passes than the previous step
                g = ref()
                if g is not None and g is self._param_list[i].grad and g._version == version:
                    hooked.append(_grad_entry(g))  # as its last backward left it
                else:
                    lost.add(i)  # changed since (unscale_, clipping, zero_grad): not as backward left it
            at_step = [] if lost else [_grad_entry(p.grad) for i, p in enumerate(self._param_list)
                                       if i not in self._entries and i not in self._deferred and p.grad is not None]
            parts = [(hooked, self._hook_scale), (at_step, None)]
            probe = None if lost else "backward-hooks" if hooked else "at_step" if at_step else None
        if probe is None:
            self._steps_without_grads += 1
            if lost and not self._warned_lost:
                self._warned_lost = True
                warnings.warn(
                    f"ampcheck_recorder: step {self._step}: this step ran fewer backward passes (micro-batches) than "
                    f"the previous one, and its grads were changed or dropped (unscale_, clipping, zero_grad) before "
                    f"step(): the grad hooks measure from the previous step's number of backward passes on, so this "
                    f"step's grad_norm and grad fractions are NaN (attribute steps_without_grads counts such steps). "
                    f"Call after_backward() after the last backward of each step where the number of micro-batches "
                    f"varies", stacklevel=3)
            elif not lost and not self._warned_no_grads:
                self._warned_no_grads = True
                warnings.warn(
                    f"ampcheck_recorder: step {self._step}: no gradients seen at step() (every .grad is None and no "
                    f"backward ran through the model since the last step) — is `model` the module being trained, "
                    f"and step() called once per optimizer step, before the next backward? A loop that sets .grad "
                    f"without backward must call after_backward() or step() before "
                    f"optimizer.zero_grad(set_to_none=True). grad_norm and the grad fractions will be NaN and "
                    f"`ampcheck judge` will not judge them (attribute steps_without_grads counts such steps)",
                    stacklevel=3)
            return None
        self._grad_probes[probe] = self._grad_probes.get(probe, 0) + 1
        if probe == "backward-hooks" and not self._warned_distributed and _world_size() > 1:
            self._warned_distributed = True
            warnings.warn(
                f"ampcheck_recorder: step {self._step}: torch.distributed runs {_world_size()} processes and the grads "
                f"were read by the backward hooks, which see this rank's own grads, before DistributedDataParallel's "
                f"all-reduce: call rec.after_backward() after the last backward of each step (before unscale_ / "
                f"clipping) to record the all-reduced grads", stacklevel=3)
        sumsq = torch.zeros((), dtype=torch.float64, device=dev)
        counts = torch.zeros(3, dtype=torch.float64, device=dev)
        n = 0
        if self._grads_unscaled:  # a BackwardHookScaler unscaled each grad before it was accumulated
            parts = [(entries, None) for entries, _ in parts]
        for entries, scale in parts:  # (the hooks' entries, divided by the scale; those read at step(), not)
            by_device = {}
            for e in entries:
                by_device.setdefault(e[0].device, []).append(e)
                n += e[4]
            for es in by_device.values():  # one stack of the norms and one of the counts per device
                sq = torch.stack([e[0] for e in es]).double().square().sum().to(dev)
                sumsq = sumsq + (sq if scale is None else sq / scale.to(dev, torch.float64).square())
                counts = counts + torch.stack([c for e in es for c in e[1:4]]).view(-1, 3).sum(0).to(dev, torch.float64)
        nonzero, below_tiny, finite = counts.unbind()
        zero = n - nonzero
        n = max(n, 1)
        return [sumsq.sqrt(), zero / n, (below_tiny - zero) / n, (n - finite) / n]

    def _dtypes(self):
        return ",".join(sorted({str(p.dtype).replace("torch.", "") for p in self._param_list})) or "none"

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

    def _snapshot_if_due(self):
        """Crash safety: every snapshot_every recorded steps, the file is rewritten (atomically: a temporary file, then
        a rename) with every step so far and status `running` — so a run killed outright (SIGKILL, the OOM killer)
        leaves a readable file up to its last snapshot, which `ampcheck judge` judges as a partial run."""
        if self.snapshot_every and len(self.rows) - self._snapshot_rows >= self.snapshot_every:
            _write_atomically(self.path, self.rows, [c for c in COLUMNS if c in self._measured],
                              self._attributes("running", None, f"snapshot after {len(self.rows)} step(s)"))
            self._snapshot_rows = len(self.rows)

    def _finish(self, exc, status=None, note=None):
        if self._closed:
            return
        self._closed = True
        _open_recorders.discard(self)
        for h in self._hooks:
            h.remove()
        if isinstance(exc, KeyboardInterrupt) and status is None:
            # Ctrl-C / SIGINT: every recorded step kept, a partial run like SIGTERM's, not a failed one
            status, exc = "interrupted", None
            note = note or f"interrupted by SIGINT (KeyboardInterrupt) after {self._step} step(s)"
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
        attrs = self._attributes(status or ("error" if exc is not None else "completed"), exc, note)
        if exc is not None:
            attrs["failed_step"] = str(len(self.rows))
        _write_atomically(self.path, self.rows, [c for c in COLUMNS if c in self._measured], attrs)

    def _attributes(self, status, exc, note):
        attrs = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "recorder": "ampcheck_recorder 1",
            "status": status,
            "error": _error_text(exc) if exc is not None else "",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch_version": torch.__version__.split("+")[0],
        }
        attrs.update(_device_attributes(self._cuda if self._cuda is not None else self._model_device().type == "cuda"))
        if self.model is not None:
            attrs["device"] = str(self._model_device())
        if self.model is not None:
            attrs["model"] = type(self.model).__name__
            attrs["model_parameters"] = str(sum(p.numel() for p in self.model.parameters()))
        if self.optimizer is not None:
            attrs["optimizer"] = type(self.optimizer).__name__
        if self._scaler_on():
            attrs["scaler"] = (f"GradScaler(init_scale={self.scaler._init_scale}, growth_interval="
                               f"{self.scaler._growth_interval})")
        attrs.update(self.attributes)
        # measured, after the caller's attributes: what was in effect, whatever the caller's attributes say
        attrs["grad_scaler"] = "none" if self.scaler is None else "enabled" if self._scaler_on() else "disabled"
        if self.model is not None:
            attrs["param_dtype"] = self._param_dtype or self._dtypes()
            attrs["autocast_dtype"] = self._autocast[0] if self._autocast is not None else "unknown"
            if self.probe_every:
                order = sorted(self._grad_probes, key=lambda k: (-self._grad_probes[k], GRAD_PROBES.index(k)))
                attrs["grad_probe"] = ",".join(order) or "none"
                attrs["steps_without_grads"] = str(self._steps_without_grads)
        if self._nonfinite is not None:
            attrs.update(self._nonfinite.attributes())
        if attrs.get("device_class", "").startswith("cuda"):  # the process's peak, for the sweep's memory column
            attrs["peak_memory_bytes"] = str(torch.cuda.max_memory_allocated())
        if note:
            attrs["note"] = note
        return attrs


def nudge_ulp(model, direction=+1):
    """Move every floating parameter of `model` (a Module, or an iterable of tensors) one ulp up (direction=+1) or
    down (-1), in place, without grad: torch.nextafter towards +inf / -inf. For the noise runs `ampcheck reference`
    takes: make the FP32 run again with nudged initial weights and record it with perturbation="ulp".

    An ulp run measures chaos — how fast two FP32 runs one rounding apart drift apart — not the spread of an equally
    valid training (another seed, another data order). `ampcheck reference` needs at least one `seed` or `order`
    run; ulp runs only add to them."""
    if direction not in (1, -1):
        raise ValueError(f"direction {direction!r}: must be +1 or -1")
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    with torch.no_grad():
        for p in params:
            if p.is_floating_point():
                p.copy_(torch.nextafter(p, torch.tensor(math.inf * direction, dtype=p.dtype, device=p.device)))


_FINFO = {}


def _grad_entry(g):
    """One grad's statistics, as 0-d tensors on its device (no host sync), and its numel: (2-norm — in fp32 for
    16-bit grads, as _norm —, non-zero count, count of |g| < tiny (zeros included), count of |g| <= max (finite),
    numel). NaN is non-zero and fails both comparisons. Seven small ops: a hook runs it per parameter and backward."""
    g = g.detach()  # (a grad made with create_graph=True has history; no op here records any)
    info = _FINFO.get(g.dtype) or _FINFO.setdefault(g.dtype, torch.finfo(g.dtype))
    numel, implicit = g.numel(), 0
    if g.layout != torch.strided:  # a sparse grad (nn.Embedding(sparse=True)): its values, plus the implicit zeros
        g = (g if g.is_sparse else g.to_sparse()).coalesce().values()
        implicit = numel - g.numel()
    mag = g.abs()
    return (torch.linalg.vector_norm(g, dtype=torch.float32 if info.bits < 32 else None), torch.count_nonzero(g),
            torch.count_nonzero(mag < info.tiny) + implicit, torch.count_nonzero(mag <= info.max) + implicit, numel)


def _world_size():
    dist = getattr(torch, "distributed", None)
    return dist.get_world_size() if dist is not None and dist.is_available() and dist.is_initialized() else 1


def _autocast_dtype(device_type):
    try:
        on, dtype = torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError, AttributeError):  # older torch: the per-device functions
        if device_type == "cpu":
            on, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
        elif device_type == "cuda":
            on, dtype = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        else:
            return "unknown"
    return str(dtype).replace("torch.", "") if on else "none"


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
        return {"device_name": torch.cuda.get_device_name(), "device_class": f"cuda-sm{major}{minor}",
                "cuda_version": str(torch.version.cuda)}
    return {"device_name": platform.processor() or platform.machine(), "device_class": "cpu"}


def _write_atomically(path, rows, columns, attrs):
    _writing[0] += 1
    try:
        _write_atomically_now(path, rows, columns, attrs)
    finally:
        _writing[0] -= 1
    if _writing[0] == 0 and _deferred_signal[0] is not None:
        signum, _deferred_signal[0] = _deferred_signal[0], None
        _on_sigterm(signum, None)


def _write_atomically_now(path, rows, columns, attrs):
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
