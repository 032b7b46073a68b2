#!/usr/bin/env python3
"""Two runs of the same suites give the same results: every field of every scenario in summary.json identical but the
measurements (step times, throughput, memory, per-rank timings) and the engine plan. For a change that must not
change behaviour (a refactor): run the suites before and after into two folders, then

    python3 ci/same_results.py BEFORE_DIR AFTER_DIR ci sensitivity-nano dist

Exit status 1 on any difference (each printed)."""
import json, sys
IGN = {"median_step_ms","p10_step_ms","p90_step_ms","tokens_per_s","samples_per_s","tflops","peak_tflops","mfu",
       "peak_memory_bytes","peak_reserved_bytes","timing_method","warmup_steps","engine_plan"}
def load(p):
    s = json.load(open(p))
    return {c["name"]: c for c in s["scenarios"]}, s
bad = 0
for suite in sys.argv[3:]:
    a, sa = load(f"{sys.argv[1]}/{suite}/summary.json"); b, sb = load(f"{sys.argv[2]}/{suite}/summary.json")
    assert a.keys() == b.keys(), suite
    n = 0
    for k in a:
        for f in sorted(set(a[k]) | set(b[k])):
            if f in IGN: continue
            x, y = a[k].get(f), b[k].get(f)
            if f == "distributed" and isinstance(x, dict):  # per-rank timings are measurements, not results
                x = {kk: v for kk, v in x.items() if not kk.startswith("rank_")}
                y = {kk: v for kk, v in y.items() if not kk.startswith("rank_")}
            if x != y:
                bad += 1; print(suite, k, f, str(a[k].get(f))[:150], "|", str(b[k].get(f))[:150])
        n += 1
    print(f"{suite}: {n} scenarios compared (verdict, pass, message, margins, signals, warnings, ...)")
print("DIFFERENCES:", bad)
sys.exit(1 if bad else 0)
