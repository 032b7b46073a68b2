"""Hugging Face Trainer integration: `AmpcheckCallback` records a Trainer's run in ampcheck's trajectory format.

    from ampcheck.integrations.hf import AmpcheckCallback
    cb = AmpcheckCallback("runs/fp16.h5", attributes={"run_key": "my-model-v3"})
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
    cb.train(trainer)          # = trainer.train(), and an exception that ends it is recorded as the error run

What it does for you: unwraps accelerate's optimizer (the Recorder's hooks go on the torch optimizer inside), finds the
GradScaler accelerate made (`AcceleratedOptimizer.scaler`), records the per-step loss (the model's `loss` output of
every training forward of the step, averaged over the micro-batches), probes the grads as backward produced them
(before the Trainer's unscale and clipping: the Recorder's grad hooks), records skipped steps (fused optimizers'
`found_inf` included), warns when the LR scheduler advanced on a step the optimizer skipped, runs `ampcheck.preflight`
at `on_train_begin` (fp16 parameters with a GradScaler: the error PyTorch will raise, recorded as the error run and
raised before training), and closes the file at `on_train_end`.

perturbation="skip" (or skip_first_step=True): the callback does not take the first optimizer step (the FP32 `skip`
noise run), recorded as skipped with no scheduler warning. `fp16=True` on a CPU: accelerate runs nothing in fp16
there (no autocast, no GradScaler); preflight says so.

Under `ampcheck sweep` (AMPCHECK_PLAN set), `cb.train(trainer)` applies the plan before training, the Trainer's own way:
its TrainingArguments' fp16 / bf16 / mixed_precision set to the strategy and its accelerator re-created from them
(`create_accelerator_and_postprocess`, as the Trainer's hyperparameter search does after resetting accelerate's state),
a CPU GradScaler handed to accelerate where it makes none (fp16 on a CPU), the model cast for pure-bf16, keep_fp32
modules hooked (plan_hooks.py), TF32 set, seed and data_seed offset (and the RNGs reseeded), the first step skipped for
`skip`; the run stops after the plan's max_steps (control.should_training_stop) and is recorded at the plan's path. A
plan the Trainer cannot train (fp8 without torchao, fp16-master-weights) is recorded as refused and the process ends.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.amp.grad_scaler import GradScaler
from torch.utils.hooks import RemovableHandle
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ampcheck.integrations._session import RecordingSession
from ampcheck.plan_hooks import PlanHooks, StepWrapper
from ampcheck.recorder import unwrap_optimizer
from ampcheck.under_plan import UnderPlan, model_device

_MIXED = {torch.float16: "fp16", torch.bfloat16: "bf16", None: "no"}


class AmpcheckCallback(TrainerCallback, RecordingSession):
    def _own_state(self) -> None:  # (RecordingSession.__init__ takes the arguments, then calls this)
        self._losses: list[torch.Tensor] = []
        self._tokens = 0
        self._hook: RemovableHandle | None = None
        self._accelerated: Any = None  # accelerate's AcceleratedOptimizer
        self._warned_scheduler = False
        self._found_infs: list[
            tuple[int, torch.Tensor]
        ] = []  # (step, found_inf device tensor) of fused steps accelerate counted as taken

    # -- Trainer events ---------------------------------------------------------------------------------------------

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        optimizer: Any = None,
        **kwargs: Any,
    ) -> None:
        assert model is not None  # the Trainer passes its model to every event
        self._accelerated = optimizer
        mixed = "fp16" if args.fp16 else "bf16" if args.bf16 else None
        scaler = getattr(optimizer, "scaler", None)  # accelerate's optimizer holds the GradScaler it made
        # accelerate runs fp16 only where it made a GradScaler (on a CPU it makes none, and no autocast)
        active = None if mixed != "fp16" else scaler is not None
        if self.plan is not None and self.under_plan is None:
            self.under_plan = UnderPlan(
                self.plan,
                "refused: the plan is applied by AmpcheckCallback.train(trainer); call it in place of trainer.train()",
            )
        elif self.under_plan is not None and self.skip_first() and optimizer is not None:
            assert self.under_plan.hooks is not None  # an applied plan has its hooks (a refused one ended the process)
            self.under_plan.hooks.step_wrapper = StepWrapper(unwrap_optimizer(optimizer), skip_first=True, scaler=None)
        self._hook = model.register_forward_hook(self._on_forward, with_kwargs=True)
        try:
            self.start(model, optimizer, scaler, mixed, f"hf-trainer {mixed or 'fp32'}", autocast_active=active)
        except Exception:
            self._remove_hook()
            raise

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        **kwargs: Any,
    ) -> None:
        rec = self.recorder
        if self.recorder is not None and not self.recorder.recording:  # another rank's: counts the step (the guard)
            self.recorder.step(0.0)
            control.should_training_stop = control.should_training_stop or self.guard_stopped()
            return
        if rec is None or not self.open():
            return
        # did the LR scheduler advance on a step the optimizer skipped? A non-fused optimizer's skip is known on the
        # host (its step pre-hook did not run); a fused one's found_inf is a device tensor, read with the others in one
        # transfer when the recorder flushes (no sync per step)
        accelerate_skipped = bool(getattr(self._accelerated, "step_was_skipped", False))
        planned_skip = (state.global_step - 1) in self.planned_skips()  # ours (skip run): no warning
        if lr_scheduler is not None and not accelerate_skipped and not self._warned_scheduler and not planned_skip:
            if not rec._stepped:
                self._warn_scheduler(state.global_step - 1)
            elif rec._found_inf is not None:
                self._found_infs.append((state.global_step - 1, rec._found_inf))
                if len(self._found_infs) >= rec.options.flush_every:
                    self._check_found_infs()
        loss = torch.stack(self._losses).mean() if self._losses else torch.tensor(float("nan"))
        self._losses = []
        if self._tokens:  # tokens per optimizer step (every micro-batch), for the judge's tokens/s
            rec.attributes["tokens_per_step"] = str(self._tokens)
            self._tokens = 0
        rec.step(loss)
        if self.reached_max_steps(state.global_step):
            control.should_training_stop = True  # the plan's max_steps: the recording closed itself, complete
        if self.guard_stopped():
            control.should_training_stop = True  # the live guard: the file is written (interrupted) and judged

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._check_found_infs()
        self._remove_hook()
        if self.recorder is not None:
            self.recorder.close()

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _check_found_infs(self) -> None:
        if self._found_infs and not self._warned_scheduler:
            flags = torch.stack([f.reshape(()).float() for _, f in self._found_infs]).cpu().tolist()
            for (step, _), flag in zip(self._found_infs, flags):
                if flag > 0:
                    self._warn_scheduler(step)
                    break
        self._found_infs = []

    def _warn_scheduler(self, step: int) -> None:
        self._warned_scheduler = True
        warnings.warn(
            f"ampcheck: step {step} was skipped by the optimizer (inf/NaN grads) but accelerate reports it "
            f"taken, so the LR scheduler advanced on it (a fused optimizer's found_inf is invisible to "
            f"accelerate's step_was_skipped)",
            stacklevel=3,
        )

    def train(self, trainer: Trainer, *args: Any, **kwargs: Any) -> Any:
        """trainer.train(...), and an exception that ends it recorded as the error run (the Trainer has no event for
        it), then raised. Under a sweep plan, the plan is applied to the Trainer first (module docstring)."""
        if self.plan is not None and self.under_plan is None:
            self._apply_plan(trainer)
        try:
            return trainer.train(*args, **kwargs)
        except BaseException as e:
            self._remove_hook()
            if self.recorder is not None and self.open():
                self.recorder._finish(e)
            raise

    def _apply_plan(self, trainer: Trainer) -> None:
        model, args = trainer.model, trainer.args
        assert model is not None  # a Trainer has its model
        # reseeded below, once the accelerator is re-created from the offset seed
        plan = self.plan_prologue(model, "the Hugging Face Trainer", "hf-trainer", None)
        prec = plan.precision
        mixed = _MIXED[prec.autocast_dtype]
        args.fp16, args.bf16, args.mixed_precision = mixed == "fp16", mixed == "bf16", mixed
        if plan.seed_offset:
            args.seed += plan.seed_offset
            if args.data_seed is not None:
                args.data_seed += plan.seed_offset
        if trainer.accelerator.mixed_precision != mixed or plan.seed_offset:
            from accelerate.state import AcceleratorState

            AcceleratorState._reset_state()  # as Trainer's hyperparameter search does before re-creating it
            trainer.create_accelerator_and_postprocess()
        self.reseed_for_plan(args.seed - plan.seed_offset)  # data order and dropout from the offset seed
        if mixed == "fp16" and trainer.accelerator.scaler is None:  # a CPU: accelerate makes none (docs/USING.md)
            trainer.accelerator.scaler = GradScaler(model_device(model).type)
            trainer.accelerator.native_amp = True
        hooks = PlanHooks(plan, model, None, autocast=False, param_dtype=True)
        self.under_plan = UnderPlan(plan, "yes", hooks)

    def _on_forward(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if module.training and torch.is_grad_enabled():
            ids = kwargs.get("input_ids", args[0] if args and torch.is_tensor(args[0]) else None)
            if torch.is_tensor(ids):
                self._tokens += ids.numel()
            loss = getattr(output, "loss", None)
            if loss is None and isinstance(output, dict):
                loss = output.get("loss")
            if isinstance(loss, torch.Tensor):
                self._losses.append(loss.detach().float())

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
