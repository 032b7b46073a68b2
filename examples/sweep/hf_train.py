#!/usr/bin/env python3
"""A Hugging Face Trainer script as a user writes it, recorded with ampcheck: the sweep's example (and test) script.

    python3 examples/sweep/hf_train.py --model gpt2 --steps 30 --out runs/hf.h5
    ampcheck sweep --steps 30 -- python3 examples/sweep/hf_train.py --model llama

A tiny model from a config (gpt2, llama, bert, t5; nothing downloaded) learns a synthetic Markov language on the CPU (or
the GPU the Trainer picks) with the Trainer's AdamW. The only ampcheck lines are the callback and `cb.train(trainer)`
(which records an exception that ends training); under `ampcheck sweep` (AMPCHECK_PLAN set) the callback trains the
run the plan asks for — precision, seed, skip, max_steps, FP32 modules — and records it where the plan says.
--plant-overflow MODULE multiplies that module's weights by 1e6 (its fp16 activations overflow: a planted fault).
"""
import argparse

import tiny_models

tiny_models.import_ampcheck()
from ampcheck.integrations.hf import AmpcheckCallback  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=tiny_models.MODELS, default="gpt2")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    ap.add_argument("--plant-overflow", metavar="MODULE", help="a module name (model.named_modules()) to break")
    ap.add_argument("--out", default="runs/hf_train.h5", help="the recording, outside a sweep")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW's learning rate (default 3e-3)")
    args = ap.parse_args()

    from transformers import Trainer, TrainingArguments, set_seed
    set_seed(args.seed)
    model = tiny_models.build(args.model)
    if args.plant_overflow:
        tiny_models.plant_overflow(model, args.plant_overflow)
    training = TrainingArguments(output_dir="hf_train_output", max_steps=args.steps,
                                 per_device_train_batch_size=tiny_models.BATCH, learning_rate=args.lr,
                                 lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0, seed=args.seed,
                                 logging_steps=1000, save_strategy="no", report_to=[], disable_tqdm=True,
                                 dataloader_num_workers=0)
    callback = AmpcheckCallback(args.out, attributes={"run_key": f"hf-tiny-{args.model}"}, overwrite=True)
    trainer = Trainer(model=model, args=training, train_dataset=tiny_models.MarkovText(), callbacks=[callback])
    callback.train(trainer)


if __name__ == "__main__":
    main()
