"""ampcheck's recorder for PyTorch-Python training loops.

Records a training run in ampcheck's trajectory format (docs/TRAJECTORY_FORMAT.md, format `ampcheck-trajectory`
version 1) so that `ampcheck judge RUN --reference REF` can compare it, signal by signal, with an FP32 reference
built by `ampcheck reference FP32_RUN --spread RUN...`. Depends on torch and (for .h5 files) h5py only.

    from ampcheck import Recorder

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

step() goes once per optimizer step, anywhere after the optimizer step and before the next backward. The grads are
read at the end of each backward through the model (grad hooks and autograd's final callback; probe steps only,
probe_every=10 by default: <= 2% of a GPU step, python/README.md "Overhead"), fused on their device, with no host sync
until a flush every flush_every steps. Pass the GradScaler whenever one scales the loss. after_backward() only for loops
that set or change .grad outside backward. docs/TRAJECTORY_FORMAT.md, "Writing it from PyTorch", says where each call
goes and why, what each column and attribute holds, the warnings, the ranks under torch.distributed, the crash-safe
file (snapshots, SIGTERM, interpreter exit) and the behaviour under `ampcheck sweep`'s plan.

The live guard (guard.py): reference="ref.h5" judges the partial run every judge_every steps (default 50) in-process
against the reference's first steps; a failure is logged (logger `ampcheck`); a verdict in stop_on (e.g.
("nonfinite", "diverges")) ends the recording (status `interrupted`, the file judged once more) and raises GuardStop
from step() (stop_raises=False: the integrations stop their trainer instead). The judgement runs on a background thread
(judge_in_background=False: on the training thread; a judged step with a new non-finite loss is judged at once); the
steps not judged only check whether it has finished.
"""

from __future__ import annotations

import math
import os
import warnings
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch.amp.grad_scaler import GradScaler
from torch.utils.hooks import RemovableHandle

from ampcheck._grad_reader import GradReader
from ampcheck._probes import norm, nudge_ulp
from ampcheck._recorder_options import DEFAULT_PROBE_EVERY, PERTURBATIONS, RecorderKeywords, RecorderOptions
from ampcheck._step_clock import StepClock
from ampcheck._torch_context import autocast_dtype, device_attributes, rank_and_world, rank_path, unwrap_optimizer
from ampcheck._trajectory_file import (
    COLUMNS,
    FORMAT,
    FORMAT_VERSION,
    check_path,
    error_text,
    forget_open,
    register_open,
    write_atomically,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_PROBE_EVERY",
    "FORMAT",
    "FORMAT_VERSION",
    "GRAD_PROBES",
    "PERTURBATIONS",
    "Recorder",
    "RecorderKeywords",
    "RecorderOptions",
    "nudge_ulp",
    "rank_and_world",
    "rank_path",
    "unwrap_optimizer",
]
from ampcheck.guard import GuardStop
from ampcheck.nonfinite import NonfiniteTracker
from ampcheck.plan import current_plan, module_table
from ampcheck.plan_hooks import BackwardHookScaler, StepWrapper
from ampcheck.under_plan import PlanRefused, UnderPlan, apply_to_loop

if TYPE_CHECKING:
    from typing_extensions import Unpack  # (typing's from Python 3.11)

_DEVICE_COLUMNS = COLUMNS[:9]  # the columns computed on the loss's device (the others are host values)
_GRAD_COLUMNS = ("grad_norm", "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad")
GRAD_PROBES = ("backward-hooks", "after_backward", "at_step")  # the values of the attribute grad_probe (and `none`)
_FORWARDS_LOOKED_AT = 16  # the forward pre-hook looks at this many forwards at most, then removes itself


class Recorder:
    """Records one training run (module docstring). The keyword arguments are the Recorder's options, each documented
    and checked in RecorderOptions (`self.options`); `options=RecorderOptions(...)` gives them as one object (the two
    together: TypeError). __init__: the options, the ranks that record, the plan, the file's path checked, the
    attributes, then the hooks on the optimizer and the model."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: torch.nn.Module | None = None,
        optimizer: Any = None,
        scaler: GradScaler | BackwardHookScaler | None = None,
        *,
        options: RecorderOptions | None = None,
        **keywords: Unpack[RecorderKeywords],
    ) -> None:
        self.options = options = RecorderOptions.given(options, keywords)  # each option checked, once
        # under torch.distributed (DDP, torchrun, accelerate launch): rank 0 records, or each rank its own file
        self.rank, self.world_size = rank_and_world()
        self.recording = self.world_size == 1 or options.per_rank or self.rank == 0
        self.path = os.fspath(path)
        if self.world_size > 1 and options.per_rank:
            self.path = rank_path(self.path, self.rank)
        self.guard = options.guard()
        self._guard_rows = 0  # the rows the guard has seen (a judged step with non-finite new rows is judged at once)
        self.rows: list[dict[str, float]] = []  # finished host rows: dict column -> float
        # (columns, device row tensor, host dict, timing mark) of the steps not yet copied to the host
        self._pending: list[tuple[list[str], torch.Tensor, dict[str, float], tuple[Any, ...]]] = []
        self._step, self._closed, self._under_plan = 0, False, options.under_plan
        if not self.recording:  # another rank's recorder: counts steps (the guard's stop is agreed by all ranks)
            self.model, self.optimizer, self.scaler = model, optimizer, scaler
            self._closed, self.snapshot_every = True, 0
            self.attributes = {k: str(v) for k, v in (options.attributes or {}).items()}
            return
        under_plan, scaler, perturbation = self._take_plan(model, optimizer, scaler)
        self._under_plan = under_plan
        check_path(self.path, options.overwrite)
        self.snapshot_every = options.snapshot_interval()
        self._snapshot_rows = 0  # rows in the last snapshot written
        torch_optimizer: Any = unwrap_optimizer(optimizer) if optimizer is not None else None
        self._skipper: StepWrapper | None = None
        if options.skip_first_step and under_plan is None:  # the first optimizer step not taken: the `skip` noise run
            self._skipper = StepWrapper(torch_optimizer, skip_first=True, scaler=None)
        self.model, self.optimizer, self.scaler = model, torch_optimizer, scaler
        self.attributes = options.recorded_attributes(under_plan, perturbation)
        if torch_optimizer is not optimizer:  # the hooks go on the torch optimizer that steps; the wrapper is named
            self.attributes.setdefault("optimizer_wrapper", type(optimizer).__name__)
        if self.guard is not None:  # the reference checked against this run before any training or hook
            self.guard.check_reference(self.attributes, model)
        self._start_state()
        self._hook_optimizer(optimizer)
        self._hook_model(model)
        self._nonfinite = self._nonfinite_tracker(model, under_plan)
        if under_plan is not None and model is not None:
            self.attributes["modules"] = module_table(model)
        register_open(self)
        if under_plan is not None and under_plan.refused:  # the error run, then the process ends
            refused = under_plan.plan
            self._finish(PlanRefused(f"plan {refused.run} ({refused.strategy}): {under_plan.applied}"))
            raise SystemExit(f"ampcheck: {self.path}: plan {refused.run} ({refused.strategy}) {under_plan.applied}")

    # the options the Recorder had as attributes before they became one object (read-only now: `options` holds them)
    @property
    def probe_every(self) -> int:
        return self.options.probe_every

    @property
    def flush_every(self) -> int:
        return self.options.flush_every

    @property
    def stop_raises(self) -> bool:
        return self.options.stop_raises

    def _take_plan(
        self, model: torch.nn.Module | None, optimizer: Any, scaler: GradScaler | BackwardHookScaler | None
    ) -> tuple[UnderPlan | None, GradScaler | BackwardHookScaler | None, str | None]:
        """A sweep plan (AMPCHECK_PLAN, or the one an integration applied): the plan's path, and its precision applied
        here when no integration did (the scaler it brings). Returns (the plan as applied, the scaler, the perturbation
        recorded outside a plan: skip_first_step's 'skip', checked, or the one given)."""
        under_plan = self.options.under_plan
        plan = under_plan.plan if under_plan is not None else current_plan()
        if plan is None:
            return None, scaler, self.options.perturbation_outside_a_plan(optimizer)
        self.path = plan.record
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if under_plan is None:
            under_plan, scaler = apply_to_loop(plan, model, optimizer, scaler, skip_first=self.options.skip_first_step)
        return under_plan, scaler, None  # (the plan's perturbation is recorded: recorded_attributes)

    def _start_state(self) -> None:
        """The state the steps carry, before the first one."""
        self._measured = {"loss", "step_time_ms"}
        self._clock = StepClock()  # step_time_ms
        self._next_scale = self._current_scale()  # the scale the next step's backward uses (update() ran before)
        self._stepped = False
        self._found_inf: torch.Tensor | None = None
        self._snapshot: list[torch.Tensor] | None = None
        self._lr = math.nan
        self._hooks: list[Any] = []
        self._param_list: list[torch.nn.Parameter] = []  # the model's, filled once by _params()
        self._buffers: list[torch.Tensor] | None = None  # the parameter snapshot, reused from probe to probe
        self._param_dtype: str | None = None  # decided on the first step()
        # (autocast dtype name, from a forward with grad enabled) from the forward pre-hook
        self._autocast: tuple[str, bool] | None = None
        self._forwards = 0
        self._forward_hook: list[RemovableHandle] = []

    def _hook_optimizer(self, given: Any) -> None:
        """The step pre-hook on the torch optimizer (lr, skipped), or a warning where `given` holds none."""
        if self.optimizer is not None and not hasattr(self.optimizer, "register_step_pre_hook"):
            warnings.warn(
                f"ampcheck_recorder: {type(given).__name__} is not a torch.optim.Optimizer and holds none "
                f"(no .optimizer / ._optimizer): the recorder cannot see its steps — lr, skipped and "
                f"update_norm are not recorded (pass the torch optimizer inside it)",
                stacklevel=3,  # the Recorder(...) call
            )
            self.optimizer = None
        if self.optimizer is not None:
            self._hooks.append(self.optimizer.register_step_pre_hook(self._pre_step))
            self._measured.update(("lr", "skipped"))

    def _nonfinite_tracker(
        self, model: torch.nn.Module | None, under_plan: UnderPlan | None
    ) -> NonfiniteTracker | None:
        """The first non-finite module's watch where track_nonfinite asks for it — by default under a plan, but not in
        the sweep's timing re-runs (time-*: their ms/step is all they are for, and the watch's hooks cost a CPU-bound
        step several per cent)."""
        track = self.options.track_nonfinite
        if track is None:
            track = under_plan is not None and not under_plan.plan.run.startswith("time-")
        if model is None or not track:
            return None
        tracker = NonfiniteTracker(model)
        self._hooks.extend(tracker.handles)
        return tracker

    def _hook_model(self, model: torch.nn.Module | None) -> None:
        """The grads' reader, and the model's hooks: forward pre-hooks for the autocast in effect, and the grad hooks
        where grads are probed. The forward pre-hooks go on the submodules with parameters of their own: they run
        inside the model's forward, where a framework's autocast wrapper of model.forward (accelerate's prepare_model)
        is in effect — a hook on the model itself runs before that wrapper and would see autocast off. All of them, as
        the first one need not run (T5's `shared` embedding: the encoder calls its own embed_tokens); the first to run
        decides, then all go."""
        if model is not None:
            self._params()
        self._grads = GradReader(
            self._param_list,
            self._probe_step,
            lambda: self._current_scale() if self._scaler_on() else None,
            lambda: self._closed,
            bool(getattr(self.scaler, "grads_unscaled_in_backward", False)),
        )
        if self._scaler_on():
            self._measured.add("loss_scale")
        if model is None:
            return
        self._measured.add("param_norm")
        owners = [m for m in model.modules() if m is not model and any(True for _ in m.parameters(False))]
        self._forward_hook = [m.register_forward_pre_hook(self._on_forward) for m in owners or [model]]
        self._hooks.extend(self._forward_hook)
        if self.options.probe_every:
            self._measured.update(_GRAD_COLUMNS)
            if self.optimizer is not None:
                self._measured.add("update_norm")
            self._hooks.extend(self._grads.hooks())

    # -- the loop's calls -----------------------------------------------------------------------------------------

    def after_backward(self) -> None:
        """Optional: probe every .grad now, in place of the end-of-backward reading, for this step. Only for a loop
        that sets .grad without backward or changes .grad between backward and unscale_ (divides it, all-reduces it
        itself); call it after the last backward (and that change) and before unscale_ / clipping. The norm is
        divided by the scaler's current scale."""
        if not self.recording:
            return
        self._grads.after_backward()

    def step(self, loss: torch.Tensor | float, eval_loss: float | None = None) -> None:
        """Once per optimizer step, after optimizer.step() / scaler.step() (and scaler.update()), before the next
        backward; before or after optimizer.zero_grad() and scheduler.step()."""
        if not self.recording:
            self._step += 1
            if self.guard is not None and self.guard.due(self._step):
                self._agree_on_stop()
            return
        if self._closed:
            raise RuntimeError(f"{self.path}: the recorder is closed")
        loss_t = loss.detach().reshape(()) if torch.is_tensor(loss) else torch.tensor(float(loss), dtype=torch.float64)
        dev = loss_t.device
        if self._clock.cuda is None:
            self._clock.cuda = dev.type == "cuda"
        lr = (
            self._lr if self._stepped else (float(self.optimizer.param_groups[0]["lr"]) if self.optimizer else math.nan)
        )
        host = dict.fromkeys(_DEVICE_COLUMNS, math.nan)  # host values; device values are listed in `cols`/`vals`
        host.update(lr=lr, eval_loss=float(eval_loss) if eval_loss is not None else math.nan)
        cols, vals = ["loss"], [loss_t.to(torch.float64)]
        if self._scaler_on():
            scale = next(s for s in (self._grads.scale_used, self._grads.hook_scale, self._next_scale) if s is not None)
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
                stats = self._grads.columns(dev, self._step)  # None: no gradient at all (the columns stay NaN)
                if stats is not None:
                    cols.extend(_GRAD_COLUMNS)
                    vals.extend(stats)
                if self.optimizer is not None:
                    if self._snapshot is not None:  # the snapshot buffers become before - after, in place
                        torch._foreach_sub_(self._snapshot, params)
                        cols.append("update_norm")
                        vals.append(norm(self._snapshot).to(dev))
                    elif not self._stepped:
                        host["update_norm"] = 0.0
                cols.append("param_norm")
                vals.append(norm(params).to(dev))
        if self._nonfinite is not None:
            cols.extend(("_nonfinite_forward", "_nonfinite_backward"))
            vals.extend(self._nonfinite.collect(dev))
        if eval_loss is not None:
            self._measured.add("eval_loss")
        self._pending.append((cols, torch.stack(vals), host, self._clock.mark()))
        self._step += 1
        self._snapshot, self._stepped, self._lr, self._found_inf = None, False, math.nan, None
        self._grads.step_done()
        self._next_scale = self._current_scale()
        snapshot_due = self.snapshot_every and self._step - self._snapshot_rows >= self.snapshot_every
        if len(self._pending) >= self.options.flush_every or snapshot_due:
            self.flush()
        if snapshot_due:
            self._snapshot_if_due()
        if self.guard is not None:
            if self.guard.due(self._step):
                self._judge_now()
            elif self.world_size == 1 and self.guard.poll():  # a background verdict that stops: stop now
                self._agree_on_stop()
        plan = self._under_plan.plan if self._under_plan is not None else None
        if plan is not None and plan.max_steps and self._step >= plan.max_steps:
            self._finish(None, note=f"stopped at the plan's max_steps ({plan.max_steps})")
            if self._under_plan is not None and self._under_plan.exit_at_max_steps:
                raise SystemExit(0)  # a plain loop: the run is recorded and complete; the script ends here

    def _judge_now(self) -> None:
        """The live guard's judged step: the file written (unless this step's snapshot just was) and judged; a verdict
        in stop_on ends the recording (status `interrupted`), judges the file once more and raises GuardStop where
        stop_raises (a plain loop; the integrations stop their trainer instead)."""
        assert self.guard is not None  # called only with a guard
        self.flush()
        if self._snapshot_rows != len(self.rows):
            self._write_snapshot()
        urgent = any(not math.isfinite(r.get("loss", 0.0)) for r in self.rows[self._guard_rows :])
        self._guard_rows = len(self.rows)
        last_nonfinite = bool(self.rows) and not math.isfinite(self.rows[-1].get("loss", 0.0))
        self.guard.submit(self.path, urgent, len(self.rows), len(self.rows) - 1 if last_nonfinite else None)
        self._agree_on_stop()

    def _agree_on_stop(self) -> None:
        """Every rank learns whether any rank's guard stopped (one small collective, on judged steps only), so that all
        of them stop at the same step; then this rank's recording ends and GuardStop is raised where stop_raises."""
        assert self.guard is not None  # called only with a guard
        stopped = self.guard.stopped
        if self.world_size > 1:
            import torch.distributed as dist

            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, stopped)
            stopped = next((j for j in gathered if j is not None), None)
            if stopped is not None and self.guard.stopped is None:
                self.guard.stopped = stopped
        if stopped is None:
            return
        if self.recording and not self._closed:
            self._finish(
                None,
                status="interrupted",
                note=f"stopped by the live guard after {len(self.rows)} step(s): judged {stopped.verdict}",
            )
            self.guard.judge_final(self.path)  # the file as written, judged
        if self.options.stop_raises:
            raise GuardStop(self.path, stopped, self.guard.final)

    def flush(self) -> None:
        """Copy the pending steps to the host (one device->host copy; the only sync the recorder makes)."""
        if not self.recording or not self._pending:
            return
        values = torch.cat([p[1] for p in self._pending]).cpu().tolist()
        i = 0
        for cols, _, host, mark in self._pending:
            r = dict(host)
            r.update(zip(cols, values[i : i + len(cols)]))
            i += len(cols)
            if "_nonfinite_forward" in r:
                assert self._nonfinite is not None  # (the tracker's columns)
                self._nonfinite.seen(len(self.rows), r.pop("_nonfinite_forward"), r.pop("_nonfinite_backward"))
            r["step_time_ms"] = self._clock.elapsed_ms(mark)
            self.rows.append(r)
        self._pending.clear()

    def close(self) -> None:
        """Write the file (status completed)."""
        self._finish(None)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self._finish(exc)
        return False  # an exception goes on up: the recorder only records it

    # -- internals ------------------------------------------------------------------------------------------------

    def _scaler_on(self) -> bool:
        return self.scaler is not None and self.scaler.is_enabled()

    def _probe_step(self) -> bool:
        probe_every = self.options.probe_every
        return probe_every > 0 and self._step % probe_every == 0

    def _model_device(self) -> torch.device:
        """The device of the model's first parameter now (a Trainer may have moved it after the Recorder was made)."""
        p = next(self.model.parameters(), None) if self.model is not None else None
        return p.device if p is not None else torch.device("cpu")

    def _params(self) -> list[torch.Tensor]:
        if (
            not self._param_list and self.model is not None
        ):  # the Parameter objects stay the same through .to() / .half()
            self._param_list = list(self.model.parameters())
        return [p.detach() for p in self._param_list]

    def _current_scale(self) -> torch.Tensor:
        if not self._scaler_on():
            return torch.ones((), dtype=torch.float64)
        assert self.scaler is not None  # (_scaler_on)
        s: torch.Tensor | None = getattr(
            self.scaler, "_scale", None
        )  # the device tensor GradScaler keeps (created on first scale())
        if s is None:
            return torch.tensor(
                float(getattr(self.scaler, "_init_scale", self.scaler.get_scale())), dtype=torch.float64
            )
        return s.detach().clone().reshape(())

    def _pre_step(
        self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any
    ) -> None:  # optimizer step pre-hook: the step is taken (not skipped)
        self._stepped = True
        self._lr = float(optimizer.param_groups[0]["lr"])
        found_inf = getattr(optimizer, "found_inf", None)  # GradScaler.step sets it for a fused optimizer
        if torch.is_tensor(found_inf):
            self._found_inf = found_inf.detach().clone()
        if self.model is not None and self._probe_step():
            with torch.no_grad():
                params = self._params()
                if self._buffers is None or any(
                    b.shape != p.shape or b.dtype != p.dtype or b.device != p.device
                    for b, p in zip(self._buffers, params)
                ):
                    self._buffers = [p.clone() for p in params]
                else:
                    torch._foreach_copy_(self._buffers, params)
                self._snapshot = self._buffers

    def _on_forward(
        self, module: torch.nn.Module, args: Any
    ) -> None:  # forward pre-hook: the autocast state of the first (training) forward
        self._forwards += 1
        training = torch.is_grad_enabled()
        if self._autocast is None or (training and not self._autocast[1]):
            dev = self._param_list[0].device.type if self._param_list else "cpu"
            self._autocast = (autocast_dtype(dev), training)
        if training or self._forwards >= _FORWARDS_LOOKED_AT * len(
            self._forward_hook
        ):  # (calls of every hooked module)
            for h in self._forward_hook:
                h.remove()

    def _dtypes(self) -> str:
        return ",".join(sorted({str(p.dtype).replace("torch.", "") for p in self._param_list})) or "none"

    def _snapshot_if_due(self) -> None:
        """Crash safety: every snapshot_every recorded steps, the file is rewritten (atomically: a temporary file, then
        a rename) with every step so far and status `running` — so a run killed outright (SIGKILL, the OOM killer)
        leaves a readable file up to its last snapshot, which `ampcheck judge` judges as a partial run."""
        if self.snapshot_every and len(self.rows) - self._snapshot_rows >= self.snapshot_every:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        """The file written with every step so far, status `running`."""
        note = f"snapshot after {len(self.rows)} step(s)"
        write_atomically(self.path, self.rows, self._columns(), self._attributes("running", None, note))
        self._snapshot_rows = len(self.rows)

    def _columns(self) -> list[str]:
        """The columns measured, in the file's order."""
        return [c for c in COLUMNS if c in self._measured]

    def _finish(self, exc: BaseException | None, status: str | None = None, note: str | None = None) -> None:
        if self._closed or not self.recording:
            return
        self._closed = True
        forget_open(self)
        if self.guard is not None:
            self.guard.close()  # the background judgement in flight taken in
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
                self.rows[-1]["param_norm"] = float(norm(self._params()))
        attrs = self._attributes(status or ("error" if exc is not None else "completed"), exc, note)
        if exc is not None:
            attrs["failed_step"] = str(len(self.rows))
        write_atomically(self.path, self.rows, self._columns(), attrs)

    def _attributes(self, status: str, exc: BaseException | None, note: str | None) -> dict[str, str]:
        attrs = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "recorder": "ampcheck_recorder 1",
            "status": status,
            "error": error_text(exc) if exc is not None else "",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch_version": torch.__version__.split("+")[0],
        }
        attrs.update(
            device_attributes(self._clock.cuda if self._clock.cuda is not None else self._model_device().type == "cuda")
        )
        if self.model is not None:
            attrs["device"] = str(self._model_device())
        if self.model is not None:
            attrs["model"] = type(self.model).__name__
            attrs["model_parameters"] = str(sum(p.numel() for p in self.model.parameters()))
        if self.optimizer is not None:
            attrs["optimizer"] = type(self.optimizer).__name__
        if self.scaler is not None and self._scaler_on():
            attrs["scaler"] = (
                f"GradScaler(init_scale={self.scaler._init_scale}, growth_interval={self.scaler._growth_interval})"
            )
        attrs.update(self.attributes)
        # measured, after the caller's attributes: what was in effect, whatever the caller's attributes say
        attrs["grad_scaler"] = "none" if self.scaler is None else "enabled" if self._scaler_on() else "disabled"
        if self.model is not None:
            attrs["param_dtype"] = self._param_dtype or self._dtypes()
            attrs["autocast_dtype"] = self._autocast[0] if self._autocast is not None else "unknown"
            # FP8 training that keeps fp32 parameters and no autocast (torchao's Float8Linear casts inside the layer)
            attrs["float8_linears"] = str(sum(type(m).__name__.startswith("Float8") for m in self.model.modules()))
            if self.options.probe_every:
                order = sorted(self._grads.probes, key=lambda k: (-self._grads.probes[k], GRAD_PROBES.index(k)))
                attrs["grad_probe"] = ",".join(order) or "none"
                attrs["steps_without_grads"] = str(self._grads.steps_without_grads)
        if self._nonfinite is not None:
            attrs.update(self._nonfinite.attributes())
        if attrs.get("device_class", "").startswith("cuda"):  # the process's peak, for the sweep's memory column
            attrs["peak_memory_bytes"] = str(torch.cuda.max_memory_allocated())
        if note:
            attrs["note"] = note
        return attrs
