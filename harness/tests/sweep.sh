#!/usr/bin/env bash
# `ampcheck sweep` end to end on the CPU over a real Hugging Face Trainer script (examples/sweep/hf_train.py, a tiny
# GPT-2 from a config, transformers / accelerate as pinned): a planted fault — transformer.h.0.mlp.c_fc's weights x 1e6,
# in the FP32 runs too — makes fp16 autocast + GradScaler go non-finite while bf16 autocast tracks; the verdict's
# message names the first non-finite module (c_fc, forward); --localize names c_fc or its parent block within
# 2·log2(modules) + 2 probe runs; a second sweep reuses every run. A command that never opts in, and one that records
# without reading its plan, are named as such (exit 2) after its first FP32 run. Pure bf16's lost updates (the
# fp32-master fix named) and the other models and frameworks: harness/tests/sweep_models.sh.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
script=$src/examples/sweep/hf_train.py
fail() { echo "FAIL: $*"; exit 1; }

# 1. the planted fault: fp16 fails, bf16 tracks, localization names the module; a FAIL row: exit 1
rc1=0
"$ampcheck" sweep --out "$work/s1" --steps 30 --localize --timing-rounds 0 --strategies fp16-autocast-scaler,bf16-autocast -- \
  "$python" "$script" --model gpt2 --plant-overflow transformer.h.0.mlp.c_fc > "$work/s1.log" 2>&1 || rc1=$?
[ $rc1 = 1 ] || { cat "$work/s1.log"; fail "sweep 1 exited $rc1 (wanted 1: fp16's row FAILs)"; }
"$python" - "$work/s1" <<'PY' || { cat "$work/s1.log"; exit 1; }
import json, math, sys, h5py
d = sys.argv[1]
s = json.load(open(f"{d}/sweep.json"))
rows = {r["strategy"]: r for r in s["strategies"]}
fp16, bf16 = rows["fp16-autocast-scaler"], rows["bf16-autocast"]
assert bf16["verdict"] == "tracks" and bf16["pass"], bf16
assert fp16["verdict"] in ("nonfinite", "diverges", "stalls") and not fp16["pass"], fp16
assert "first non-finite: module transformer.h.0.mlp.c_fc (forward)" in fp16["message"], fp16["message"]
loc = fp16["localization"]
named = loc["modules"] + [loc["parent"]]
assert loc["found"] and ("transformer.h.0.mlp.c_fc" in loc["modules"] or loc["parent"] in ("transformer.h.0.mlp", "transformer.h.0")), loc
modules = json.loads(h5py.File(f"{d}/runs/{s['key']}/fp32.h5", "r").attrs["modules"])
budget = 2 * math.log2(len(modules)) + 2
assert loc["probes"] <= budget, (loc["probes"], budget)
assert s["recommendation"].startswith("bf16-autocast") or "bf16-autocast" in s["recommendation"], s["recommendation"]
print(f"planted fault: fp16 {fp16['verdict']}, localized {loc['modules']} in {loc['probes']} probes "
      f"(budget {budget:.1f} for {len(modules)} modules); bf16 tracks")
PY
grep -q "RECOMMENDATION: " "$work/s1.log" || fail "no recommendation on the terminal"
# 2. resumed: nothing trained again
"$ampcheck" sweep --out "$work/s1" --steps 30 --localize --timing-rounds 0 --strategies fp16-autocast-scaler,bf16-autocast -- \
  "$python" "$script" --model gpt2 --plant-overflow transformer.h.0.mlp.c_fc > "$work/s1b.log" 2>&1 || true
grep -q ": 0 trainings, " "$work/s1b.log" || { tail -3 "$work/s1b.log"; fail "a second sweep trained again"; }

# 3. a command that never opts in; one that ignores the plan (model.half() hard-coded): named, exit 2
set +e
"$ampcheck" sweep --out "$work/s3" --steps 5 -- "$python" -c "pass" > "$work/s3.log" 2>&1; rc3=$?
cat > "$work/own.py" <<PY
# records where the plan says, but reads nothing else of it (the plan taken out of the environment first)
import json, os, sys
plan = json.load(open(os.environ.pop("AMPCHECK_PLAN")))
sys.path.insert(0, "$src/python/src")
import torch, ampcheck
model = torch.nn.Linear(4, 4); opt = torch.optim.SGD(model.parameters(), lr=0.1)
with ampcheck.Recorder(plan["record"], model, opt, overwrite=True) as rec:
    for _ in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
PY
"$ampcheck" sweep --out "$work/s4" --steps 5 -- "$python" "$work/own.py" > "$work/s4.log" 2>&1; rc4=$?
set -e
[ $rc3 = 2 ] && grep -q "does not opt in" "$work/s3.log" || { cat "$work/s3.log"; fail "never opting in not named (rc $rc3)"; }
[ $rc4 = 2 ] && grep -q "never read AMPCHECK_PLAN" "$work/s4.log" || { cat "$work/s4.log"; fail "an ignored plan not named (rc $rc4)"; }
! grep -q "fp32-seed" "$work/s3.log" || { cat "$work/s3.log"; fail "the sweep went on after its first FP32 run failed"; }
echo "sweep: all checks passed"
