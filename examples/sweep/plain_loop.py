#!/usr/bin/env python3
"""A plain PyTorch training loop recorded with ampcheck's Recorder: the sweep's example (and test) script.

    python3 examples/sweep/plain_loop.py --steps 30 --out runs/plain.h5
    ampcheck sweep --steps 30 -- python3 examples/sweep/plain_loop.py

The tiny GPT-2 of tiny_models.py, AdamW, gradient clipping, in FP32 as written. The only ampcheck lines are the
Recorder and rec.step(loss); under `ampcheck sweep` (AMPCHECK_PLAN set) the Recorder applies the plan to the model and
optimizer by hooks (parameter dtype, autocast around the model's forward, a GradScaler in the backward and the
optimizer's step, the skipped first step, FP32 modules) and records where the plan says.
"""
import argparse

import torch

import tiny_models

tiny_models.import_ampcheck()
from ampcheck import Recorder  # noqa: E402
from ampcheck.plan import current_plan  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=tiny_models.MODELS, default="gpt2")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--plant-overflow", metavar="MODULE")
    ap.add_argument("--out", default="runs/plain_loop.h5")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    # under `ampcheck sweep` the seed run's offset must reach this seed: the model and the data order are drawn here,
    # before the Recorder exists (a seed run bit-identical to the FP32 run is refused: it measures no noise)
    plan = current_plan()
    torch.manual_seed(args.seed + (plan.seed_offset if plan else 0))
    model = tiny_models.build(args.model)
    if args.plant_overflow:
        tiny_models.plant_overflow(model, args.plant_overflow)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    data = torch.utils.data.DataLoader(tiny_models.MarkovText(), batch_size=tiny_models.BATCH, shuffle=True)
    batches = iter(data)
    with Recorder(args.out, model, optimizer, attributes={"run_key": f"plain-tiny-{args.model}"}, overwrite=True) as rec:
        for step in range(args.steps):
            batch = next(batches)
            loss = model(input_ids=batch["input_ids"].to(device), labels=batch["labels"].to(device)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            rec.step(loss)


if __name__ == "__main__":
    main()
