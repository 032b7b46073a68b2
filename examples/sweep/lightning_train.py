#!/usr/bin/env python3
"""A Lightning training script recorded with ampcheck: the sweep's example (and test) script.

    python3 examples/sweep/lightning_train.py --steps 30 --out runs/lightning.h5
    ampcheck sweep --steps 30 -- python3 examples/sweep/lightning_train.py

The tiny GPT-2 of tiny_models.py in a LightningModule, AdamW, gradient clipping, precision "32-true" as written. The only
ampcheck line is the callback; under `ampcheck sweep` (AMPCHECK_PLAN set) it sets the Trainer's precision plugin to
the plan's strategy before the model is set up, and applies seed, skip, max_steps and FP32 modules.
"""
import argparse

import torch

import tiny_models

tiny_models.import_ampcheck()
from ampcheck.integrations.lightning import AmpcheckLightningCallback  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--plant-overflow", metavar="MODULE")
    ap.add_argument("--out", default="runs/lightning_train.h5")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    import lightning.pytorch as pl

    class TinyLM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_models.build("gpt2")

        def training_step(self, batch, index):
            return self.net(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.0)

    pl.seed_everything(args.seed, verbose=False)
    module = TinyLM()
    if args.plant_overflow:
        tiny_models.plant_overflow(module, args.plant_overflow)
    callback = AmpcheckLightningCallback(args.out, attributes={"run_key": "lightning-tiny-gpt2"}, overwrite=True)
    trainer = pl.Trainer(max_steps=args.steps, precision="32-true", gradient_clip_val=1.0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback])
    data = torch.utils.data.DataLoader(tiny_models.MarkovText(), batch_size=tiny_models.BATCH, shuffle=True)
    trainer.fit(module, data)


if __name__ == "__main__":
    main()
