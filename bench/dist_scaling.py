#!/usr/bin/env python3
"""Data-parallel scaling in one call: the same model and per-rank batch at world size 1, 2, 4, 8 (weak scaling: the
global batch grows with the ranks), each a data-parallel scenario run by `ampcheck run` (ranks started by ampcheck,
c10d NCCL on GPUs or Gloo on CPU processes), plus the same model with no data parallel at all.

Per world size: the step time (the slowest rank's median after the warm-up steps), tokens/s in all and per GPU, the
scaling efficiency (tokens/s per GPU against world size 1 measured in the same call) and the share of the step
spent in collectives (per rank: collective time / step time, over every step; the median of the ranks — NCCL:
elapsed GPU time between CUDA events around each collective on the step's stream; Gloo: the blocking wait's wall
clock, harness/distributed/data_parallel.h), peak memory. Everything is written under --out: scenarios/ (the generated
scenario files), runs/ (every run's trajectories, rank files and logs), scaling.jsonl, scaling.md.

    python3 bench/dist_scaling.py --ampcheck build/ampcheck --out /tmp/scaling \
        --preset gpt2-124m --strategy bf16-autocast --per-rank-batch 8 --seq-len 1024 \
        --world-sizes 1,2,4,8 --backend nccl --device cuda --steps 30
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import h5py
import numpy as np

SCENARIO = """name: {name}
why: "dist_scaling.py: {preset} at {per_rank} x {seq_len} tokens a rank, {world} ranks ({backend})."
device: {device}
seed: 1337
model: {{kind: gpt, preset: {preset}}}
data: {{kind: synthetic, batch_size: {batch}, seq_len: {seq_len}, corpus_tokens: {corpus}}}
optimizer: {{kind: adamw, lr: 0.0006, betas: [0.9, 0.95], weight_decay: 0.1, fused: {fused}}}
schedule: {{kind: cosine, warmup_steps: 5, min_lr_ratio: 0.1}}
train: {{steps: {steps}}}
strategy: {strategy}
{distributed}expect: {{verdict: tracks}}
"""


def attr(f, k, default=""):
    v = f.attrs.get(k, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def read_rank(path, warmup):
    with h5py.File(path, "r") as f:
        if attr(f, "status") != "completed":
            raise SystemExit(f"{path}: status {attr(f, 'status')}: {attr(f, 'error')}")
        result = json.loads(attr(f, "rank_result"))  # the rank's result (harness/distributed/launcher.cpp)
        t = np.asarray(f["steps/step_time_ms"][:], dtype=float)
        finite = t[np.isfinite(t)]
        number = lambda k: float("nan") if result.get(k) is None else float(result[k])  # null: not measured
        return {
            "median_ms": float(np.median(t[warmup:][np.isfinite(t[warmup:])])),
            "total_ms": float(finite.sum()),
            "collective_ms": number("collective_ms"),
            "tokens_per_step": number("tokens_per_step"),
            "peak_bytes": number("peak_memory_bytes"),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--out", required=True, help="directory for every file this writes (created; must be empty or absent unless --force)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--strategy", default="bf16-autocast")
    ap.add_argument("--per-rank-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--world-sizes", default="1,2")
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--reduce-dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the median step time")
    ap.add_argument("--no-plain", action="store_true", help="skip the run without data parallel")
    a = ap.parse_args()
    worlds = [int(w) for w in a.world_sizes.split(",")]
    if sorted(worlds) != worlds or worlds[0] != 1:
        raise SystemExit(f"--world-sizes {a.world_sizes}: expected increasing sizes starting at 1 (the efficiency's baseline)")
    if a.warmup >= a.steps:
        raise SystemExit(f"--warmup {a.warmup} must be below --steps {a.steps}")
    if os.path.isdir(a.out) and os.listdir(a.out) and not a.force:
        raise SystemExit(f"{a.out}: not empty (use --force to replace what this script wrote there)")
    os.makedirs(os.path.join(a.out, "scenarios"), exist_ok=True)
    runs = os.path.join(a.out, "runs")
    rows = []
    cases = ([("plain", 1)] if not a.no_plain else []) + [("dp", w) for w in worlds]
    for kind, w in cases:
        name = f"scaling-{a.preset}-{kind}{w if kind == 'dp' else ''}"
        batch = a.per_rank_batch * w
        dist = "" if kind == "plain" else (
            f"distributed: {{world_size: {w}, backend: {a.backend}, reduce_dtype: {a.reduce_dtype}, "
            f"check_every: {a.steps}, timeout_s: 300}}\n")
        path = os.path.join(a.out, "scenarios", name + ".yaml")
        with open(path, "w") as f:
            f.write(SCENARIO.format(name=name, preset=a.preset, per_rank=a.per_rank_batch, seq_len=a.seq_len, world=w,
                                    backend=a.backend, device=a.device, batch=batch,
                                    corpus=max(1 << 18, 4 * batch * a.seq_len * a.steps),
                                    fused="true" if a.device == "cuda" else "false", steps=a.steps,
                                    strategy=a.strategy, distributed=dist))
        t0 = time.time()
        p = subprocess.run([a.ampcheck, "run", path, "--device", a.device, "--out", runs, "--force"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
            raise SystemExit(f"{name}: ampcheck run exited {p.returncode}")
        if kind == "plain":
            with h5py.File(os.path.join(runs, name + ".h5"), "r") as f:
                t = np.asarray(f["steps/step_time_ms"][:], dtype=float)[a.warmup:]
                ranks = [{"median_ms": float(np.median(t[np.isfinite(t)])), "total_ms": float("nan"),
                          "collective_ms": float("nan"), "tokens_per_step": float(batch * a.seq_len),
                          "peak_bytes": float("nan")}]
        else:
            ranks = [read_rank(os.path.join(runs, f"{name}.ranks", f"rank{k}.h5"), a.warmup) for k in range(w)]
        step_ms = max(r["median_ms"] for r in ranks)
        tokens = ranks[0]["tokens_per_step"]
        shares = [r["collective_ms"] / r["total_ms"] for r in ranks if r["total_ms"] > 0]
        row = {"kind": kind, "world_size": w, "global_batch": batch, "seq_len": a.seq_len, "preset": a.preset,
               "strategy": a.strategy, "backend": a.backend if kind == "dp" else "none", "device": a.device,
               "reduce_dtype": a.reduce_dtype if kind == "dp" else "", "steps": a.steps, "warmup": a.warmup,
               "step_ms": step_ms, "tokens_per_step": tokens, "tokens_per_s": tokens / step_ms * 1e3,
               "tokens_per_s_per_gpu": tokens / step_ms * 1e3 / w,
               "rank_median_ms": [r["median_ms"] for r in ranks],
               "collective_share": float(np.median(shares)) if shares else float("nan"),
               "rank_collective_share": shares,
               "peak_memory_gib": max(r["peak_bytes"] for r in ranks) / 2**30, "wall_s": time.time() - t0}
        rows.append(row)
        print(f"{name}: {step_ms:.2f} ms/step, {row['tokens_per_s']:.0f} tokens/s", flush=True)
    base = next(r for r in rows if r["kind"] == "dp" and r["world_size"] == 1)
    for r in rows:
        r["scaling_efficiency"] = r["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]
    with open(os.path.join(a.out, "scaling.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    fmt = lambda v, p=3: "n/a" if v != v else f"{v:.{p}g}"
    lines = [f"# Data-parallel scaling: {a.preset}, {a.strategy}, {a.per_rank_batch} x {a.seq_len} tokens a rank, "
             f"{a.backend} on {a.device}, gradients reduced in {a.reduce_dtype}", "",
             f"{a.steps} steps a run, the median step after {a.warmup} (the slowest rank's); efficiency: tokens/s per rank (GPU) "
             "against world size 1 of this call; collective share: time on collectives / step time, the median "
             "of the ranks (bench/dist_scaling.py).", "",
             "| run | ranks | global batch | ms/step | tokens/s | tokens/s per rank | scaling efficiency | collective share | peak GiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {'no data parallel' if r['kind'] == 'plain' else 'data parallel'} | {r['world_size']} | "
                     f"{r['global_batch']} | {r['step_ms']:.2f} | {r['tokens_per_s']:.0f} | "
                     f"{r['tokens_per_s_per_gpu']:.0f} | {r['scaling_efficiency']:.3f} | "
                     f"{fmt(100 * r['collective_share'])}{'' if r['collective_share'] != r['collective_share'] else ' %'} | "
                     f"{fmt(r['peak_memory_gib'])} |")
    with open(os.path.join(a.out, "scaling.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
