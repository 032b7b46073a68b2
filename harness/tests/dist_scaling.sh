#!/usr/bin/env bash
# bench/dist_scaling.py as a smoke run on Gloo CPU processes (the micro GPT, 1 and 2 ranks and no data parallel):
# every row is there with finite, positive figures, world size 2 steps twice world size 1's tokens, each rank's
# collective share lies in (0, 1), the efficiency of world size 1 is 1; a second call into the same directory is
# refused without --force. No timing is asserted (the figures come from the H200: ci/gpu.sh's multigpu stage).
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
args=(--ampcheck "$ampcheck" --out "$work/s" --preset micro --strategy fp32 --per-rank-batch 4 --seq-len 32
      --world-sizes 1,2 --backend gloo --device cpu --steps 12 --warmup 4)
"$python" "$src/bench/dist_scaling.py" "${args[@]}" > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$python" - "$work/s/scaling.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["kind"], r["world_size"]) for r in rows] == [("plain", 1), ("dp", 1), ("dp", 2)], rows
plain, one, two = rows
assert two["tokens_per_step"] == 2 * one["tokens_per_step"] == 2 * 4 * 32, rows
for r in rows:
    assert r["step_ms"] > 0 and math.isfinite(r["tokens_per_s"]) and r["tokens_per_s_per_gpu"] > 0, r
for r in (one, two):
    assert len(r["rank_collective_share"]) == r["world_size"] and all(0 < s < 1 for s in r["rank_collective_share"]), r
    assert r["peak_memory_gib"] > 0, r
assert one["scaling_efficiency"] == 1.0 and two["scaling_efficiency"] > 0, rows
print("scaling rows:", [(r["kind"], r["world_size"], round(r["step_ms"], 2), round(r["collective_share"], 3)) for r in rows])
PY
grep -q "| data parallel | 2 | 8 |" "$work/s/scaling.md" || { cat "$work/s/scaling.md"; exit 1; }
if "$python" "$src/bench/dist_scaling.py" "${args[@]}" > "$work/log2" 2>&1; then echo "FAIL: a second call overwrote"; exit 1; fi
grep -q "not empty (use --force" "$work/log2" || { cat "$work/log2"; exit 1; }
echo "dist_scaling: 3 rows, ranks' shares in (0, 1), a full directory refused"
