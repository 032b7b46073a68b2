#!/usr/bin/env python3
"""The sweep's speed rankings with and without an injected CPU or GPU load (issue 52, item 4).

Each workload (a plain PyTorch loop recorded with ampcheck's Recorder, torch only) is swept into fresh directories:
once as the machine is, and once per load of --loads running for the whole sweep — `cpu`: a busy loop per core (`sh -c
'while :; do :; done'`, at the sweep's own nice level); `gpu`: another process multiplying two 8192x8192 FP32 matrices
on the same GPU without pause (time-sliced with the sweep's runs). A recommendation *changes with the load* when its answer differs: a
strategy decisively faster (and which), not decisive (no strategy shown faster: FP32), every tracking strategy
decisively slower (FP32), none tracks — read from sweep.json's rows as the sweep's recommend() reads them. A strategy's
speed claim *flips* when one sweep calls it faster and the other slower.
Prints a Markdown table (docs/USING.md "Speed rankings") and writes results.jsonl under --out.

    nice -n 5 python3 bench/sweep_load_campaign.py --ampcheck build/ampcheck --out /tmp/load-campaign
    python3 bench/sweep_load_campaign.py --ampcheck build/ampcheck --out /tmp/load-gpu --device cuda \
        --workloads gpu-tiny,gpu-wide --loads gpu,cpu   # ci/gpu.sh stage loadcampaign
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)

LOOP = """
import sys
sys.path.insert(0, {src!r})
import torch
from ampcheck import Recorder
from ampcheck.plan import current_plan
plan = current_plan()
torch.manual_seed(1234 + (plan.seed_offset if plan else 0))
width, depth, batch = {width}, {depth}, {batch}
layers = []
for i in range(depth):
    layers += [torch.nn.Linear(32 if i == 0 else width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to({device!r})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(batch, 32, device={device!r}); y = x[:, :4].sum(1, keepdim=True).tanh()
with Recorder("unused.h5", model, opt, attributes={{"tokens_per_step": str(batch)}}) as rec:
    for step in range({steps}):
        idx = torch.randint(0, batch, (batch,), device={device!r})
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
"""

# name: (width, depth, batch): overhead-bound, mid, matmul-bound (the CPU's; gpu-*: the same shapes scaled to a GPU)
WORKLOADS = {
    "mlp-tiny": (16, 2, 64), "mlp-mid": (256, 3, 256), "mlp-wide": (1024, 2, 512),
    "gpu-tiny": (64, 2, 256), "gpu-mid": (1024, 3, 4096), "gpu-wide": (8192, 3, 8192),
}
GPU_LOAD = """
import torch
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def answer(s: dict) -> tuple:
    """The recommendation's class and the strategy it names, from sweep.json's rows (as the sweep's recommend() picks):
    a strategy decisively faster (the fastest such); else 'not decisive' (no strategy shown faster: FP32); else every
    tracking strategy decisively slower (FP32); else none tracks (FP32)."""
    ok = [r for r in s["strategies"]
          if r["outcome"] == "judged" and r["verdict"] == "tracks" and r["pass"] and r["speedup"] is not None]
    faster = [r for r in ok if r["speed"] == "faster"]
    if faster:
        return ("faster", max(faster, key=lambda r: r["speedup"])["strategy"])
    if any(r["speed"] == "not decisive" for r in ok):
        return ("not decisive", "fp32")
    return ("all slower", "fp32") if ok else ("none tracks", "fp32")


def sweep(amp, out, script, steps, strategies, load, ncores):
    busy = []
    if load == "cpu":
        busy = [subprocess.Popen(["nice", "-n", "5", "sh", "-c", "while :; do :; done"]) for _ in range(ncores)]
    elif load == "gpu":
        busy = [subprocess.Popen([sys.executable, "-c", GPU_LOAD])]
        time.sleep(8)  # (its CUDA context up and multiplying before the sweep starts)
    t0 = time.time()
    try:
        log = subprocess.run([amp, "sweep", "--out", out, "--steps", str(steps), "--strategies", strategies, "--",
                              sys.executable, script], capture_output=True, text=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    s = json.load(open(os.path.join(out, "sweep.json")))
    s["wall_s"] = time.time() - t0
    s["exit"] = log.returncode
    s["load"] = load
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--strategies", default="bf16-autocast,fp16-autocast-scaler,pure-bf16")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu", help="the loops' device (cpu, cuda)")
    ap.add_argument("--loads", default="cpu", help="comma-separated loads, each swept against the quiet sweep: cpu, gpu")
    ap.add_argument("--report", action="store_true", help="print the table of --out's results.jsonl, run nothing")
    a = ap.parse_args()
    if a.report:
        return report(a.out, a.steps, a.strategies, a.cores)
    os.makedirs(a.out, exist_ok=True)
    for name in a.workloads.split(","):
        width, depth, batch = WORKLOADS[name]
        script = os.path.join(a.out, f"{name}.py")
        with open(script, "w") as f:
            f.write(LOOP.format(src=os.path.join(SRC, "python", "src"), width=width, depth=depth, batch=batch,
                                steps=a.steps, device=a.device))
        quiet = os.path.join(a.out, f"{name}-quiet")
        subprocess.run(["rm", "-rf", quiet])
        res = {"quiet": sweep(a.ampcheck, quiet, script, a.steps, a.strategies, None, a.cores)}
        print(f"{name} quiet: {res['quiet']['recommendation']}", flush=True)
        for load in a.loads.split(","):
            d = os.path.join(a.out, f"{name}-{load}")
            subprocess.run(["rm", "-rf", d])
            res[load] = sweep(a.ampcheck, d, script, a.steps, a.strategies, load, a.cores)
            print(f"{name} {load}-loaded: {res[load]['recommendation']}", flush=True)
            row = {"workload": name, "load": load, "quiet": res["quiet"], "loaded": res[load]}
            with open(os.path.join(a.out, "results.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
    report(a.out, a.steps, a.strategies, a.cores)


def report(out, steps, strategies, cores):
    rows = [json.loads(x) for x in open(os.path.join(out, "results.jsonl"))]
    speeds = lambda s: {r["strategy"]: r["speed"] for r in s["strategies"]}
    print(f"\n{steps} steps, strategies {strategies}; load cpu: {cores} busy loop(s), gpu: an FP32 matmul loop\n")
    print("| workload | load | FP32 ms/step (3 runs) | spread | per strategy: speed (x FP32; timing rounds) | "
          "recommendation | changed with the load |")
    print("|---|---|---|---|---|---|---|")
    changed = flips = 0
    printed: list = []
    for r in rows:
        q, l = r["quiet"], r["loaded"]
        ch = answer(q) != answer(l)
        fl = [k for k, v in speeds(q).items() if {v, speeds(l).get(k)} == {"faster", "slower"}]
        changed += ch
        flips += len(fl)
        conds = [(r.get("load", "cpu") + "-loaded", l)]
        if not printed or printed[-1] != r["workload"]:  # (the quiet sweep once per workload)
            conds.insert(0, ("quiet", q))
        printed.append(r["workload"])
        for cond, s in conds:
            per = "; ".join(
                f"{x['strategy']}: {x['verdict']}, {x['speed'] or '-'} ({x['speedup']:.2f}x"
                f"{'; ' + str(len(x['retimed_ms_per_step'])) if x['retimed_ms_per_step'] else ''})"
                if x["speedup"] is not None else f"{x['strategy']}: {x['verdict']}" for x in s["strategies"])
            runs = " / ".join(f"{v:.3g}" for v in s["fp32_runs_ms_per_step"] if v is not None)
            cls, who = answer(s)
            mark = ("**yes**" if ch else "no") + (" (flips: " + ", ".join(fl) + ")" if fl else "") if cond != "quiet" else ""
            print(f"| {r['workload']} | {cond} | {runs} | x{s['fp32_timing_spread']:.3g} | {per} | {cls}: {who} | {mark} |")
    print(f"\nrecommendations that changed with the load: {changed} of {len(rows)}; faster/slower flips: {flips}")


if __name__ == "__main__":
    main()
