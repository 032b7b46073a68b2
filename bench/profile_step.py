"""Where one training step's GPU time goes, for the PyTorch-Python baseline (bench/gpt_baseline.py's model: the same
ATen kernels as ampcheck's engine), eager or under torch.compile: torch.profiler over `--steps` steps after warm-up,
every CUDA kernel put in a category by bench/kernel_categories.json (the same table ampcheck_bench_train --profile
uses), per step: kernel milliseconds per category, the GPU's busy time (union of kernel intervals), the idle time
within the step (host gaps), the wall time. Prints one JSON line.

    python3 bench/profile_step.py --strategy bf16-autocast --batch 16 [--compile]
"""
import argparse
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_baseline as gb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def categorizer(path):
    cats = json.load(open(path))["categories"]
    compiled = [(name, re.compile("|".join(pats), re.I)) for name, pats in cats]

    def cat(kernel):
        for name, rx in compiled:
            if rx.search(kernel):
                return name
        return "other"
    return cat


def summarize(kernels, steps, wall_ms, cat):
    """kernels: (name, start_us, end_us) of every CUDA kernel in the profiled steps."""
    per = {}
    for name, s, e in kernels:
        c = cat(name)
        per[c] = per.get(c, 0.0) + (e - s) / 1000.0
    ivs = sorted((s, e) for _, s, e in kernels)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in ivs:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    busy_ms = busy / 1000.0 / steps
    return {"kernel_ms": {k: v / steps for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
            "kernels_per_step": len(kernels) / steps, "busy_ms": busy_ms, "wall_ms": wall_ms,
            "idle_ms": max(0.0, wall_ms - busy_ms)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--strategy", default="bf16-autocast", choices=["bf16-autocast", "fp16-autocast"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--categories", default=os.path.join(HERE, "kernel_categories.json"))
    a = ap.parse_args()
    _, step, T = gb.training_step(a.preset, a.strategy, a.batch, compile=a.compile)
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1000 / a.steps
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    out = {"impl": "pytorch-python-" + ("compile" if a.compile else "eager"), "preset": a.preset,
           "strategy": a.strategy, "batch": a.batch, "seq": T, "steps": a.steps,
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
    out.update(summarize(kernels, a.steps, wall, categorizer(a.categories)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
