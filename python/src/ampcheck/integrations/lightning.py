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

perturbation="skip" (or skip_first_step=True): the first optimizer step is not taken (its closure — forward and
backward — still runs), recorded as skipped.

Under `ampcheck sweep` (AMPCHECK_PLAN set) the callback applies the plan in `setup` (before Lightning converts the
module and makes the optimizers), the Trainer's own way: the strategy's precision plugin set to the strategy's —
Precision() (fp32, tf32), MixedPrecision("bf16-mixed"), MixedPrecision("16-mixed", scaler=GradScaler(device)) (also on
a CPU, where precision="16-mixed" alone becomes bf16), HalfPrecision("bf16-true") (pure-bf16) —, TF32 set and the global
RNGs reseeded with PL_GLOBAL_SEED + seed_offset; at `on_train_start` keep_fp32 modules hooked and the first step skipped
for `skip`; `trainer.should_stop` once the plan's max_steps are recorded, at the plan's path.
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision, Precision
from torch.amp.grad_scaler import GradScaler

from ampcheck.integrations._session import RecordingSession
from ampcheck.plan_hooks import PlanHooks
from ampcheck.under_plan import UnderPlan


def _mixed(precision: str) -> str | None:
    p = str(precision)
    return "fp16" if p.startswith("16") else "bf16" if p.startswith("bf16") else None


class AmpcheckLightningCallback(Callback, RecordingSession):
    def _own_state(self) -> None:  # (RecordingSession.__init__ takes the arguments, then calls this)
        self._losses: list[torch.Tensor] = []
        self._global_step = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        plan = self.plan
        if stage != "fit" or plan is None or self.under_plan is not None:
            return
        self.plan_prologue(
            pl_module, "Lightning", "lightning", int(os.environ.get("PL_GLOBAL_SEED", torch.initial_seed()))
        )
        device = trainer.strategy.root_device.type
        plugin: Precision
        if plan.strategy == "bf16-autocast":
            plugin = MixedPrecision("bf16-mixed", device)
        elif plan.strategy == "fp16-autocast-scaler":
            plugin = MixedPrecision("16-mixed", device, scaler=GradScaler(device))
        elif plan.strategy == "pure-bf16":
            plugin = HalfPrecision("bf16-true")
        else:
            plugin = Precision()
        trainer.strategy.precision_plugin = plugin
        self.under_plan = UnderPlan(plan, "yes")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        plugin = getattr(trainer, "precision_plugin", None) or getattr(trainer.strategy, "precision_plugin", None)
        self._global_step = trainer.global_step
        if self.under_plan is not None and not self.under_plan.refused and self.under_plan.hooks is None:
            # after Lightning converted the module (bf16-true) and made the optimizers
            assert self.plan is not None  # an UnderPlan is made only under a plan
            self.under_plan.hooks = PlanHooks(
                self.plan,
                pl_module,
                trainer.optimizers[0] if trainer.optimizers else None,
                autocast=False,
                param_dtype=False,
                skip_first=self.skip_first(),
            )
        self.start(
            pl_module,
            trainer.optimizers[0] if trainer.optimizers else None,
            getattr(plugin, "scaler", None),
            _mixed(trainer.precision),
            f"lightning {trainer.precision}",
        )

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        # under the GradScaler the plugin hands the hooks the scaled loss: the scale (a device tensor) divides it back
        scaler = self.recorder.scaler if self.recorder is not None else None
        scale = getattr(scaler, "_scale", None) if scaler is not None and scaler.is_enabled() else None
        loss = loss.detach().float()
        self._losses.append(loss / scale.to(loss.device).reshape(()) if torch.is_tensor(scale) else loss)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.stepping() or trainer.global_step == self._global_step:
            return  # not an optimizer step's last micro-batch
        self._global_step = trainer.global_step
        loss = torch.stack(self._losses).sum() if self._losses else torch.tensor(float("nan"))
        self._losses = []
        assert self.recorder is not None  # stepping() said there is one
        self.recorder.step(loss)
        if self.reached_max_steps(trainer.global_step):
            trainer.should_stop = True  # the plan's max_steps: the recording closed itself, complete
        if self.guard_stopped():
            trainer.should_stop = True  # the live guard: the file is written (interrupted) and judged

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if self.recorder is not None and self.open():
            self.recorder._finish(exception)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.recorder is not None:
            self.recorder.close()
