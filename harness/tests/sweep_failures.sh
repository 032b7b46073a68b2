#!/usr/bin/env bash
# `ampcheck sweep`'s failure paths end the run, never the sweep: a run that hangs past --timeout is stopped (SIGTERM:
# the recorder writes what it has as `interrupted`) and judged as a partial row on its steps; a run that kills itself
# (SIGKILL, as the OOM killer does) before its first snapshot is an error row with the end of its log; a run that
# raises is an error row with the exception's text. The sweep itself finishes with every row and a recommendation, and
# exits 1 (rows FAIL). The script is a tiny torch-only loop (no transformers: a run costs the torch import) that misbehaves
# in the run its plan names; the FP32 runs finish well inside the limit.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1

cat > "$work/misbehave.py" <<PY
# a plain loop recorded with ampcheck's Recorder, which misbehaves after 3 steps in one run of the sweep each
import json, os, signal, sys, time
sys.path.insert(0, "$src/python/src")
import torch
from ampcheck import Recorder
plan = json.load(open(os.environ["AMPCHECK_PLAN"]))
run = plan["run"]
torch.manual_seed(plan["seed_offset"])  # the seed run's offset reaches the init (else refused: bit-identical)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
with Recorder("unused.h5", model, opt) as rec:
    for step in range(10):
        loss = torch.nn.functional.mse_loss(model(x), y)  # (pure bf16: the plan hands the output back as fp32)
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
        if step == 2 and run == "bf16-autocast":
            time.sleep(600)  # hangs: the sweep's --timeout stops it
        if step == 2 and run == "fp16-autocast-scaler":
            os.kill(os.getpid(), signal.SIGKILL)  # killed outright, before the recorder's first snapshot
        if step == 2 and run == "pure-bf16":
            raise RuntimeError("planted failure at step 3")
PY
t0=$SECONDS
# the limit: 5x an FP32 run on 2 idle cores (2 s: a torch import and 10 steps of a tiny MLP; twice that with both
# cores busy), well below a CTest timeout; the hung run waits it out
rc=0
"$ampcheck" sweep --out "$work/s" --steps 10 --timeout 10 -- "$python" "$work/misbehave.py" > "$work/s.log" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$work/s.log"; fail "the sweep exited $rc (wanted 1: its error rows FAIL)"; }
"$python" - "$work/s/sweep.json" <<'PY' || { cat "$work/s.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
rows = {r["strategy"]: r for r in s["strategies"]}
hung, killed, raised = rows["bf16-autocast"], rows["fp16-autocast-scaler"], rows["pure-bf16"]
assert hung["outcome"] == "partial" and "stopped at the time limit" in hung["message"], hung
assert killed["outcome"] == "error" and "killed by signal 9" in killed["message"], killed
assert not killed["pass"], killed
assert raised["verdict"] == "error" and "planted failure at step 3" in raised["message"], raised
assert s["recommendation"], s
print("hung:", hung["outcome"], "| killed:", killed["outcome"], "| raised:", raised["verdict"])
PY
grep -q "stopped at its time limit" "$work/s.log" || fail "the hung run's line does not say it was stopped"
echo "sweep_failures: all checks passed ($((SECONDS - t0)) s)"
