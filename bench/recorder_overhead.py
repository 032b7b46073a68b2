#!/usr/bin/env python3
"""The recorder's cost per step on the example loop (examples/pytorch/train_amp.py), measured in one process.

For each variant, the same 100-step training runs without the recorder, with it probing every step (after_backward()
+ step(): grad norm and element fractions, a parameter snapshot for the update norm, param norm) and probing every
10 steps; the modes alternate, REPEATS times, and the median wall time per step of each is compared with the
no-recorder median of the same variant: overhead = median(with) / median(without) - 1. Threads: as the example sets
(at most 2). The HDF5 write at the end is included.

    python3 bench/recorder_overhead.py [--repeats 5] [--steps 100] [--device cpu]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "pytorch"))
import train_amp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--variants", nargs="*", default=["fp32", "fp16-autocast-scaler"])
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    train_amp.markov_corpus(64, 64 * 1024)  # built once, outside the timings
    modes = {"none": dict(record=False), "every step": dict(probe_every=1), "every 10 steps": dict(probe_every=10)}
    print(f"recorder overhead: {a.steps} steps, {a.repeats} repeats, device {a.device}, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}")
    print(f"| variant | ms/step without | probes every step | probes every 10 steps |\n| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        for v in a.variants:
            times = {m: [] for m in modes}
            for r in range(a.repeats + 1):
                for m, kw in modes.items():
                    path = os.path.join(d, f"{v}-{r}-{m.replace(' ', '')}.h5")
                    t0 = time.perf_counter()
                    train_amp.train(v, path, steps=a.steps, device=a.device, quiet=True, **kw)
                    if a.device == "cuda":
                        torch.cuda.synchronize()
                    if r > 0:  # the first round warms up
                        times[m].append((time.perf_counter() - t0) * 1e3 / a.steps)
            base = statistics.median(times["none"])
            cells = [f"{statistics.median(times[m]) / base - 1:+.1%} ({statistics.median(times[m]):.2f} ms)"
                     for m in ("every step", "every 10 steps")]
            print(f"| {v} | {base:.2f} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
