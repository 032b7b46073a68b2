"""PyTorch-Python's GradScaler cost per step on a GPT's grads (bench/gpt_baseline.py's model, fp32 params with fixed
grads, scale 1 so unscale_ leaves them unchanged): unscale_ + step + update with AdamW non-fused (foreach, host-side
skip decision) and fused (found_inf handed to the kernel), and the AdamW step alone — the same measurements as
ampcheck_bench_components' BM_GradScalerStep / BM_OptimizerStepAlone, for comparing the two ports' overhead.
Prints one JSON line.

    python3 bench/gradscaler_python.py --preset gpt2-124m
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_baseline as gb  # noqa: E402


def timed(fn, dev, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize() if dev == "cuda" else None
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
        if dev == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000 / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    L, H, C, T, V = gb.PRESETS[a.preset]
    model = gb.GPT(L, H, C, T, V).to(dev)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    out = {"impl": "pytorch-python", "preset": a.preset, "device": dev}
    for fused in (False, True):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused, foreach=None if fused else True)
        scaler = torch.amp.GradScaler(dev, init_scale=1.0)
        scaler.scale(torch.ones((), device=dev))

        def with_scaler():
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        key = "fused" if fused else "non_fused"
        out[f"optimizer_step_{key}_ms"] = timed(opt.step, dev, a.reps)
        out[f"gradscaler_step_{key}_ms"] = timed(with_scaler, dev, a.reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
