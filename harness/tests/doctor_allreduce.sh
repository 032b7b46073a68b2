#!/usr/bin/env bash
# doctor's all-reduce check through the CLI, on the CPU with Gloo: (1) the default (2 ranks) and 3 ranks run, the
# result is exact and the rates positive; (2) a rank that cannot allocate its buffer makes the check FAILED with that
# rank's own message (its in-memory log's tail) and doctor exit 1, no rank left behind; (3) --allreduce-ranks 0 skips
# it; doctor writes no file (it runs in an empty directory that stays empty).
set -euo pipefail
ampcheck=$1; python=${2:-python3}
work=$(mktemp -d); res=$(mktemp -d); trap 'rm -rf "$work" "$res"' EXIT
cd "$work"
"$ampcheck" doctor --device cpu --json > "$res/doctor-default.json"
"$ampcheck" doctor --device cpu --json --allreduce-ranks 3 --allreduce-mb 1 > "$res/doctor-3.json"
set +e; "$ampcheck" doctor --device cpu --json --allreduce-mb 400000 > "$res/doctor-oom.json"; rc=$?; set -e
"$ampcheck" doctor --device cpu --json --allreduce-ranks 0 > "$res/doctor-none.json"
[ -z "$(ls -A "$work")" ] || { ls -la "$work"; echo "FAIL: doctor wrote files"; exit 1; }
if pgrep -f "ampcheck _allreduce" > /dev/null; then pgrep -af "ampcheck _allreduce"; echo "FAIL: a rank is left"; exit 1; fi
[ $rc = 1 ] || { echo "FAIL: doctor exited $rc with a failed all-reduce check, expected 1"; exit 1; }
"$python" - "$res" <<'PY'
import json, sys
d = sys.argv[1]
load = lambda k: json.load(open(f"{d}/doctor-{k}.json"))
for k, world, mib in (("default", 2, 4), ("3", 3, 1)):
    a = load(k)["allreduce"]
    assert a["ran"] and a["correct"] and a["wrong_elements"] == 0, a
    assert a["backend"] == "gloo" and a["world_size"] == world and a["bytes"] == mib << 20 and a["device"] == "cpu", a
    assert a["median_ms"] > 0 and a["algbw_gbs"] > 0 and abs(a["busbw_gbs"] / a["algbw_gbs"] - 2 * (world - 1) / world) < 1e-9, a
    print(f"{world} gloo ranks: {mib} MiB in {a['median_ms']:.2f} ms, algbw {a['algbw_gbs']:.2f} GB/s, exact")
a = load("oom")["allreduce"]
assert not a["ran"] and "exited with code 3" in a["error"] and "can't allocate memory" in a["error"], a
print("a rank that cannot allocate:", a["error"].splitlines()[0])
assert "allreduce" not in load("none")
PY
echo "doctor all-reduce: exact on 2 and 3 Gloo ranks; a failing rank named with its message, exit 1; skipped with 0 ranks"
