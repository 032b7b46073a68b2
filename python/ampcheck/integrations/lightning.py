"""Lightning integration: `AmpcheckLightningCallback` records a `lightning.pytorch.Trainer` run in ampcheck's format.

    from ampcheck.integrations.lightning import AmpcheckLightningCallback
    trainer = L.Trainer(precision="16-mixed", callbacks=[AmpcheckLightningCallback("runs/fp16.h5")], ...)
    trainer.fit(module, data)

It finds the optimizer (`trainer.optimizers[0]`, the torch optimizer) and the GradScaler on the precision plugin,
runs `ampcheck.preflight` at `on_train_start` (the error run recorded and raised before the first step), records the
per-step loss (the losses passed to backward — divided back by the GradScaler's scale, and which Lightning has divided
by `accumulate_grad_batches`, summed over the step's micro-batches: their mean), grads as backward produced them (the Recorder's hooks: before the plugin
unscales them for `on_before_optimizer_step`), skipped steps (the optimizer step the GradScaler did not take), an
exception that ends `fit` (`on_exception`) as the error run, and closes the file at `on_train_end`.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from lightning.pytorch.callbacks import Callback

from ampcheck.integrations._session import RecordingSession


def _mixed(precision: str) -> Optional[str]:
    p = str(precision)
    return "fp16" if p.startswith("16") else "bf16" if p.startswith("bf16") else None


class AmpcheckLightningCallback(Callback, RecordingSession):
    def __init__(self, path: str, *, attributes: Optional[Dict[str, str]] = None, probe_every: int = 1,
                 overwrite: bool = False, run_preflight: bool = True, snapshot_every: Optional[int] = None):
        RecordingSession.__init__(self, path, attributes=attributes, probe_every=probe_every, overwrite=overwrite,
                                  run_preflight=run_preflight, snapshot_every=snapshot_every)
        self._losses = []
        self._global_step = 0

    def on_train_start(self, trainer, pl_module):
        plugin = getattr(trainer, "precision_plugin", None) or getattr(trainer.strategy, "precision_plugin", None)
        self._global_step = trainer.global_step
        self.start(pl_module, trainer.optimizers[0] if trainer.optimizers else None, getattr(plugin, "scaler", None),
                   _mixed(trainer.precision), f"lightning {trainer.precision}")

    def on_before_backward(self, trainer, pl_module, loss):
        # under the GradScaler the plugin hands the hooks the scaled loss: the scale (a device tensor) divides it back
        scaler = self.recorder.scaler if self.recorder is not None else None
        scale = getattr(scaler, "_scale", None) if scaler is not None and scaler.is_enabled() else None
        loss = loss.detach().float()
        self._losses.append(loss / scale.to(loss.device).reshape(()) if torch.is_tensor(scale) else loss)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self.open() or trainer.global_step == self._global_step:
            return  # not an optimizer step's last micro-batch
        self._global_step = trainer.global_step
        loss = torch.stack(self._losses).sum() if self._losses else torch.tensor(float("nan"))
        self._losses = []
        self.recorder.step(loss)

    def on_exception(self, trainer, pl_module, exception):
        if self.open():
            self.recorder._finish(exception)

    def on_train_end(self, trainer, pl_module):
        if self.recorder is not None:
            self.recorder.close()
