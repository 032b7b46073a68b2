#!/usr/bin/env python3
"""The sweep's speed rankings with and without an injected CPU load (issue 52, item 4).

Each workload (a plain PyTorch loop recorded with ampcheck's Recorder, torch only) is swept twice into fresh
directories: once as the machine is, once with a busy loop per core running for the whole sweep (`sh -c 'while :;
do :; done'`, at the sweep's own nice level). A recommendation *changes with the load* when its answer differs: a
strategy decisively faster (and which), not decisive (no strategy shown faster: FP32), every tracking strategy
decisively slower (FP32), none tracks — read from sweep.json's rows as the sweep's recommend() reads them. A strategy's
speed claim *flips* when one sweep calls it faster and the other slower.
Prints a Markdown table (docs/USING.md "Speed rankings") and writes results.jsonl under --out.

    nice -n 5 python3 bench/sweep_load_campaign.py --ampcheck build/ampcheck --out /tmp/load-campaign
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
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(batch, 32); y = x[:, :4].sum(1, keepdim=True).tanh()
with Recorder("unused.h5", model, opt, attributes={{"tokens_per_step": str(batch)}}) as rec:
    for step in range({steps}):
        idx = torch.randint(0, batch, (batch,))
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
"""

# name: (width, depth, batch): overhead-bound, mid, matmul-bound
WORKLOADS = {"mlp-tiny": (16, 2, 64), "mlp-mid": (256, 3, 256), "mlp-wide": (1024, 2, 512)}


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


def sweep(amp, out, script, steps, strategies, loaded, ncores):
    busy = []
    if loaded:
        busy = [subprocess.Popen(["nice", "-n", "5", "sh", "-c", "while :; do :; done"]) for _ in range(ncores)]
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
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--strategies", default="bf16-autocast,fp16-autocast-scaler,pure-bf16")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--cores", type=int, default=os.cpu_count())
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
                                steps=a.steps))
        res = {}
        for loaded in (False, True):
            d = os.path.join(a.out, f"{name}-{'loaded' if loaded else 'quiet'}")
            subprocess.run(["rm", "-rf", d])
            res[loaded] = sweep(a.ampcheck, d, script, a.steps, a.strategies, loaded, a.cores)
            print(f"{name} {'loaded' if loaded else 'quiet'}: {res[loaded]['recommendation']}", flush=True)
        row = {"workload": name, "quiet": res[False], "loaded": res[True]}
        with open(os.path.join(a.out, "results.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
    report(a.out, a.steps, a.strategies, a.cores)


def report(out, steps, strategies, cores):
    rows = [json.loads(x) for x in open(os.path.join(out, "results.jsonl"))]
    speeds = lambda s: {r["strategy"]: r["speed"] for r in s["strategies"]}
    print(f"\n{steps} steps, strategies {strategies}, load: {cores} busy loop(s)\n")
    print("| workload | load | FP32 ms/step (3 runs) | spread | per strategy: speed (x FP32; timing rounds) | "
          "recommendation | changed with the load |")
    print("|---|---|---|---|---|---|---|")
    changed = flips = 0
    for r in rows:
        q, l = r["quiet"], r["loaded"]
        ch = answer(q) != answer(l)
        fl = [k for k, v in speeds(q).items() if {v, speeds(l).get(k)} == {"faster", "slower"}]
        changed += ch
        flips += len(fl)
        for cond, s in (("quiet", q), ("loaded", l)):
            per = "; ".join(
                f"{x['strategy']}: {x['verdict']}, {x['speed'] or '-'} ({x['speedup']:.2f}x"
                f"{'; ' + str(len(x['retimed_ms_per_step'])) if x['retimed_ms_per_step'] else ''})"
                if x["speedup"] is not None else f"{x['strategy']}: {x['verdict']}" for x in s["strategies"])
            runs = " / ".join(f"{v:.3g}" for v in s["fp32_runs_ms_per_step"] if v is not None)
            cls, who = answer(s)
            mark = ("**yes**" if ch else "no") + (" (flips: " + ", ".join(fl) + ")" if fl else "") if cond == "loaded" else ""
            print(f"| {r['workload']} | {cond} | {runs} | x{s['fp32_timing_spread']:.3g} | {per} | {cls}: {who} | {mark} |")
    print(f"\nrecommendations that changed with the load: {changed} of {len(rows)}; faster/slower flips: {flips}")


if __name__ == "__main__":
    main()
