#!/usr/bin/env python3
"""The recorder's overhead per step on the example loop (examples/pytorch/train_amp.py, CPU): the same loop without
the recorder, with it probing every step, and probing every 10 steps; each REPS times, the median wall time per step
compared within this run. Prints a markdown table.

    python3 python/overhead.py --steps 200 --reps 5 > reports/python/recorder-overhead.md
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "pytorch"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
import torch  # noqa: E402
import train_amp  # noqa: E402


def print_table(title, command, names, times):
    """A markdown table of the median ms / step per case and its ratio to the first case (the baseline)."""
    base = statistics.median(times[names[0]])
    print(f"# {title}\n")
    print(command + "\n")
    print("| case | median ms / step | ratio |")
    print("| --- | --- | --- |")
    for name in names:
        m = statistics.median(times[name])
        print(f"| {name} | {m:.3f} | {m / base:.3f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--variant", default="fp16-autocast-scaler")
    a = ap.parse_args()
    torch.set_num_threads(1)
    d = tempfile.mkdtemp()
    cases = [("no recorder", dict(record=False)), ("probe_every=1", dict(probe_every=1)),
             ("probe_every=10", dict(probe_every=10))]
    times = {c: [] for c, _ in cases}
    for rep in range(a.reps):  # interleaved, so drifts of the machine hit every case alike
        for name, kw in cases:
            t0 = time.perf_counter()
            train_amp.train(a.variant, os.path.join(d, f"r{rep}.h5"), steps=a.steps, quiet=True, overwrite=True, **kw)
            times[name].append((time.perf_counter() - t0) / a.steps * 1e3)
    print_table(f"Recorder overhead on the example loop ({a.variant}, CPU, one thread, {a.steps} steps, {a.reps} runs each)",
                f"Command: `python3 python/overhead.py --steps {a.steps} --reps {a.reps}`. Wall time per step including "
                f"the file write at the end; ratios against the loop without the recorder, measured in the same run.",
                [c for c, _ in cases], times)

if __name__ == "__main__":
    main()
