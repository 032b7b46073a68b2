#!/usr/bin/env bash
# Issue 52, items 3, 4 and 6: noise runs that are noise, speed rankings only where the timing says so, the sweep's own
# page. One tiny plain loop (Recorder, an MLP) in three forms:
#   1. seeded before the Recorder and drawing nothing after (the plan's seed_offset reaches nothing): the sweep refuses
#      the bit-identical fp32-seed run (exit 2) saying how the seed must reach the plan per integration, and
#      `ampcheck reference` refuses the same recordings (exit 2, no file written);
#   2. its seed from the plan, and a deterministic "load" on the FP32 runs (each step sleeps: fp32 and fp32-skip 10 ms,
#      fp32-seed 80 ms — the timing spread of a loaded machine; the interleaved FP32 timing re-runs alternate 10 / 80 ms)
#      while bf16-autocast steps take 20 ms: the first ranking is within the noise, 3 rounds of interleaved re-runs do
#      not separate them, the recommendation says "not decisive" (never "faster");
#   3. the same with every FP32 run at 40 ms and bf16-autocast at 5 ms: decisively faster, confirmed by 2 rounds of
#      interleaved re-runs (a tracking strategy is always ranked by them).
# The sleeps dominate a step (the MLP's compute is well under a millisecond; a factor of 8 between FP32 runs), so the
# outcome does not depend on the machine's own load. report.html of sweep 2 leads with the recommendation, the
# strategies' table (ms/step, its spread, the timing runs, tokens/s, peak memory) and is self-contained.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1
t0=$SECONDS

# 1. the seed never reaches the training
cat > "$w/fixed_seed.py" <<PY
import sys
sys.path.insert(0, "$src/python/src")
import torch
from ampcheck import Recorder
torch.manual_seed(0)  # the script's own seed, before the Recorder exists: the plan's seed_offset reaches nothing
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
with Recorder("unused.h5", model, opt) as rec:
    for step in range(6):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
PY
rc=0
"$ampcheck" sweep --out "$w/s1" --steps 6 --strategies bf16-autocast -- "$python" "$w/fixed_seed.py" > "$w/1.log" 2>&1 || rc=$?
[ $rc = 2 ] || { cat "$w/1.log"; fail "1: a bit-identical seed run: sweep exit $rc, wanted 2"; }
for want in "bit-identical" "plain loop" "HF Trainer" "Lightning" "seed_offset"; do
  grep -q "$want" "$w/1.log" || { cat "$w/1.log"; fail "1: the sweep's refusal does not say '$want'"; }
done
[ ! -e "$w/s1/reference.h5" ] || fail "1: a reference was built from a seed run that measured no noise"
runs=$(ls -d "$w"/s1/runs/*)
rc=0
"$ampcheck" reference "$runs/fp32.h5" --spread "seed:$runs/fp32-seed.h5" "skip:$runs/fp32-skip.h5" --out "$w/ref.h5" \
  > "$w/1r.log" 2>&1 || rc=$?
[ $rc = 2 ] || { cat "$w/1r.log"; fail "1: ampcheck reference with a bit-identical seed run: exit $rc, wanted 2"; }
grep -q "bit-identical" "$w/1r.log" || { cat "$w/1r.log"; fail "1: ampcheck reference does not say why"; }
[ ! -e "$w/ref.h5" ] || fail "1: ampcheck reference wrote a reference"
echo "ok 1: a bit-identical seed run refused by the sweep and by ampcheck reference ($((SECONDS - t0)) s)"

# 2./3. the seed from the plan; step times set by sleeps per run (MODE=loaded | clear)
cat > "$w/timed.py" <<PY
import os, sys, time
sys.path.insert(0, "$src/python/src")
import torch
from ampcheck import Recorder
from ampcheck.plan import current_plan
plan = current_plan()
run = plan.run
torch.manual_seed(plan.seed_offset)
if os.environ["MODE"] == "loaded":
    if run.startswith("time-fp32-"):
        ms = 10 if int(run.rsplit("-", 1)[1]) % 2 else 80  # the interleaved FP32 re-runs: 10, 80, 10 ms
    else:
        ms = {"fp32": 10, "fp32-seed": 80, "fp32-skip": 10}.get(run, 20)
else:
    ms = 40 if plan.strategy == "fp32" else 5
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
with Recorder("unused.h5", model, opt) as rec:
    for step in range(12):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad()
        time.sleep(ms / 1000)
        rec.step(loss)
PY
MODE=loaded "$ampcheck" sweep --out "$w/s2" --steps 12 --strategies bf16-autocast -- "$python" "$w/timed.py" \
  > "$w/2.log" 2>&1 || { cat "$w/2.log"; fail "2: the loaded sweep failed"; }
"$python" - "$w/s2/sweep.json" <<'PY' || { cat "$w/2.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
row = s["strategies"][0]
assert s["fp32_timing_spread"] > 3, s["fp32_timing_spread"]
assert row["verdict"] == "tracks", row
assert row["speed"] == "not decisive", row
assert s["timing_reruns"] == 6 and len(row["retimed_ms_per_step"]) == 3, s
assert s["recommendation"].startswith("not decisive"), s["recommendation"]
assert "faster" not in s["recommendation"] and "decisively" not in s["recommendation"], s["recommendation"]
print("loaded:", s["recommendation"])
PY
html=$w/s2/report.html
"$python" - "$html" <<'PY' || exit 1
import re, sys
h = open(sys.argv[1]).read()
order = [h.find(x) for x in ("<h2>Recommendation</h2>", "not decisive", "<h2>Strategies</h2>", "<h2>Scenarios</h2>")]
assert -1 not in order and order == sorted(order), order  # the answer first, the generic page after
for want in ("ms/step (median after warm-up)", "spread [p10, p90]", "timing runs (ms/step)", "re-runs: ",
             "tokens/s", "peak memory", "bf16-autocast", "interleaved", "ampcheck sweep on"):
    assert want in h, want
assert not re.search(r"<script|<link|<img", h, re.I), "not self-contained"
assert set(re.findall(r"https?://[^\"' )<]*", h)) <= {"http://www.w3.org/2000/svg"}, "an external URL"
PY
echo "ok 2: FP32 runs 10 / 80 / 10 ms: not decisive after 3 rounds of interleaved re-runs; report.html leads with it ($((SECONDS - t0)) s)"

MODE=clear "$ampcheck" sweep --out "$w/s3" --steps 12 --strategies bf16-autocast -- "$python" "$w/timed.py" \
  > "$w/3.log" 2>&1 || { cat "$w/3.log"; fail "3: the clear sweep failed"; }
"$python" - "$w/s3/sweep.json" <<'PY' || { cat "$w/3.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
row = s["strategies"][0]
assert row["speed"] == "faster" and s["timing_reruns"] == 4, (row, s["timing_reruns"])  # 2 interleaved rounds confirm
assert s["recommendation"].startswith("bf16-autocast") and "decisively" in s["recommendation"], s["recommendation"]
print("clear:", s["recommendation"])
PY
echo "ok 3: FP32 40 ms, bf16-autocast 5 ms: faster, decisively, confirmed by 2 rounds of interleaved re-runs"
echo "sweep_noise_speed: all checks passed ($((SECONDS - t0)) s)"
