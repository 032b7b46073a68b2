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
"""
from __future__ import annotations

import warnings
from typing import Dict, Optional

import torch
from transformers import TrainerCallback

from ampcheck.integrations._session import RecordingSession


class AmpcheckCallback(TrainerCallback, RecordingSession):
    def __init__(self, path: str, *, attributes: Optional[Dict[str, str]] = None, probe_every: int = 1,
                 overwrite: bool = False, run_preflight: bool = True, snapshot_every: Optional[int] = None):
        RecordingSession.__init__(self, path, attributes=attributes, probe_every=probe_every, overwrite=overwrite,
                                  run_preflight=run_preflight, snapshot_every=snapshot_every)
        self._losses = []
        self._tokens = 0
        self._hook = None
        self._accelerated = None
        self._warned_scheduler = False
        self._found_infs = []  # (step, found_inf device tensor) of fused steps accelerate counted as taken

    # -- Trainer events ---------------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._accelerated = optimizer
        mixed = "fp16" if args.fp16 else "bf16" if args.bf16 else None
        self._hook = model.register_forward_hook(self._on_forward, with_kwargs=True)
        try:  # accelerate's optimizer holds the GradScaler it made
            self.start(model, optimizer, getattr(optimizer, "scaler", None), mixed, f"hf-trainer {mixed or 'fp32'}")
        except Exception:
            self._remove_hook()
            raise

    def on_step_end(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        rec = self.recorder
        if not self.open():
            return
        # did the LR scheduler advance on a step the optimizer skipped? A non-fused optimizer's skip is known on the
        # host (its step pre-hook did not run); a fused one's found_inf is a device tensor, read with the others in one
        # transfer when the recorder flushes (no sync per step)
        accelerate_skipped = bool(getattr(self._accelerated, "step_was_skipped", False))
        if lr_scheduler is not None and not accelerate_skipped and not self._warned_scheduler:
            if not rec._stepped:
                self._warn_scheduler(state.global_step - 1)
            elif rec._found_inf is not None:
                self._found_infs.append((state.global_step - 1, rec._found_inf))
                if len(self._found_infs) >= rec.flush_every:
                    self._check_found_infs()
        loss = torch.stack(self._losses).mean() if self._losses else torch.tensor(float("nan"))
        self._losses = []
        if self._tokens:  # tokens per optimizer step (every micro-batch), for the judge's tokens/s
            self.recorder.attributes["tokens_per_step"] = str(self._tokens)
            self._tokens = 0
        rec.step(loss)

    def on_train_end(self, args, state, control, **kwargs):
        self._check_found_infs()
        self._remove_hook()
        if self.recorder is not None:
            self.recorder.close()

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _check_found_infs(self):
        if self._found_infs and not self._warned_scheduler:
            flags = torch.stack([f.reshape(()).float() for _, f in self._found_infs]).cpu().tolist()
            for (step, _), flag in zip(self._found_infs, flags):
                if flag > 0:
                    self._warn_scheduler(step)
                    break
        self._found_infs = []

    def _warn_scheduler(self, step):
        self._warned_scheduler = True
        warnings.warn(f"ampcheck: step {step} was skipped by the optimizer (inf/NaN grads) but accelerate reports it "
                      f"taken, so the LR scheduler advanced on it (a fused optimizer's found_inf is invisible to "
                      f"accelerate's step_was_skipped)", stacklevel=3)

    def train(self, trainer, *args, **kwargs):
        """trainer.train(...), and an exception that ends it recorded as the error run (the Trainer has no event for
        it), then raised."""
        try:
            return trainer.train(*args, **kwargs)
        except BaseException as e:
            self._remove_hook()
            if self.open():
                self.recorder._finish(e)
            raise

    def _on_forward(self, module, args, kwargs, output):
        if module.training and torch.is_grad_enabled():
            ids = kwargs.get("input_ids", args[0] if args and torch.is_tensor(args[0]) else None)
            if torch.is_tensor(ids):
                self._tokens += ids.numel()
            loss = getattr(output, "loss", None)
            if loss is None and isinstance(output, dict):
                loss = output.get("loss")
            if isinstance(loss, torch.Tensor):
                self._losses.append(loss.detach().float())

    def _remove_hook(self):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
