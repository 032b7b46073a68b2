#!/usr/bin/env python3
"""The HF Trainer callback's overhead per step (python/tests/hf_util.py's tiny GPT-2, CPU, bf16 autocast): the same
Trainer run without the callback, with it probing every step, and probing every 10 steps; REPS runs each, interleaved,
the median wall time of trainer.train() per step compared within this run. Prints a markdown table.

    python3 python/overhead_hf.py --steps 200 --reps 5 > reports/python/hf-callback-overhead.md
"""
import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
import torch  # noqa: E402
import hf_util  # noqa: E402
from overhead import print_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    d = tempfile.mkdtemp()
    cases = [("no callback", dict(record=False)), ("probe_every=1", dict(probe_every=1)),
             ("probe_every=10", dict(probe_every=10))]
    times = {c: [] for c, _ in cases}
    for rep in range(a.reps):
        for name, kw in cases:
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # the Trainer's own metrics line
                t0 = time.perf_counter()
                hf_util.run(d, f"r{rep}", steps=a.steps, bf16=True, **kw)
                times[name].append((time.perf_counter() - t0) / a.steps * 1e3)
    print_table(f"HF Trainer callback overhead (tiny GPT-2, bf16 autocast, CPU, one thread, {a.steps} steps, {a.reps} "
                f"runs each)",
                f"Command: `python3 python/overhead_hf.py --steps {a.steps} --reps {a.reps}`. Wall time of the whole "
                f"Trainer run per step (Trainer set-up included); ratios against the run without the callback, same run.",
                [c for c, _ in cases], times)

if __name__ == "__main__":
    main()
