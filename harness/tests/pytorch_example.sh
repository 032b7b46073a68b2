#!/usr/bin/env bash
# The PyTorch-Python example (examples/pytorch) recorded with the ampcheck package's recorder and judged by ampcheck, on the
# CPU: the correct fp16 autocast + GradScaler and bf16 autocast runs track the reference built from the loop's own FP32
# runs; model.half() + GradScaler is an error run with PyTorch's own message; clipping before unscale_ and a forgotten
# scaler.update() are caught; report.html holds the charts. Bad input (a truncated HDF5 file, a JSON-lines file with a
# step missing its loss, a reference of another model or another length) is a clear error and writes nothing.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export AMPCHECK=$ampcheck PYTHON=$python
set +e
bash "$src/examples/pytorch/judge.sh" "$work/ex" fp16-autocast-scaler bf16-autocast half-gradscaler \
  clip-before-unscale update-forgotten > "$work/judge.log" 2>&1; rc=$?
set -e
[ $rc = 1 ] || { cat "$work/judge.log"; echo "FAIL: judge exit code $rc, expected 1 (three planted bugs)"; exit 1; }
"$python" - "$work/ex/report/summary.json" <<'PY'
import json, sys
s = {c["name"]: c for c in json.load(open(sys.argv[1]))["scenarios"]}
for ok in ("fp16-autocast-scaler", "bf16-autocast"):
    assert s[ok]["pass"] and s[ok]["verdict"] == "tracks", s[ok]
half, clip, upd = s["half-gradscaler"], s["clip-before-unscale"], s["update-forgotten"]
assert half["verdict"] == "error" and "Attempting to unscale FP16 gradients." in half["message"], half
assert upd["verdict"] == "error" and "unscale_() is being called after step()." in upd["message"], upd
assert clip["verdict"] in ("stalls", "diverges") and clip["deciding_signal"] == "update_norm", clip
assert not any(x["pass"] for x in (half, clip, upd))
for name, c in s.items():
    print(f"{name}: {c['verdict']} ({'PASS' if c['pass'] else 'FAIL'}) {c['message'][:110]}")
PY
html=$work/ex/report/report.html
[ "$(grep -o '<svg' "$html" | wc -l)" -ge 5 ] || { echo "FAIL: report.html has no charts"; exit 1; }
grep -q "clip-before-unscale" "$html" && grep -q "update_norm" "$html" || { echo "FAIL: report.html lacks the runs"; exit 1; }

# bad input: each an error naming the file, exit 2, no report directory written
runs=$work/ex/runs ref=$work/ex/reference.h5
head -c 3000 "$runs/fp16-autocast-scaler.h5" > "$work/truncated.h5"
printf '{"step": 0, "loss": 4.1}\n{"step": 1, "grad_norm": 0.5}\n' > "$work/no-loss.jsonl"
"$python" - "$runs/fp32.h5" "$work/other-model.h5" <<'PY'
import h5py, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    f.attrs["model_parameters"] = "1234567"
PY
# a 40-step run (a reference of another length), and the recorder refusing to replace a run before training starts:
# the same run named twice, in one process (one torch import) — the second is refused, the process exits non-zero
mkdir "$work/short"
if "$python" "$src/examples/pytorch/train_amp.py" --steps 40 --out "$work/short" fp32 fp32 > /dev/null 2> "$work/err.txt"; then
  echo "FAIL: the recorder replaced an existing run"; exit 1
fi
grep -q "short/fp32.h5: exists; refusing to overwrite" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
ref_sum=$(md5sum "$ref")
expect_error() {  # name, pattern, judge args...
  local name=$1 pattern=$2; shift 2
  set +e; "$ampcheck" judge "$@" --reference "$ref" --out "$work/bad-$name" > /dev/null 2> "$work/err.txt"; local rc=$?; set -e
  [ $rc = 2 ] && grep -q -- "$pattern" "$work/err.txt" && [ ! -e "$work/bad-$name" ] \
    || { cat "$work/err.txt"; echo "FAIL: $name: rc $rc, expected 2 with '$pattern' and nothing written"; exit 1; }
  echo "$name: $(cat "$work/err.txt")"
}
expect_error truncated "truncated.h5: cannot open as HDF5" "$work/truncated.h5"
expect_error no-loss "no-loss.jsonl:2: 'loss' is required" "$work/no-loss.jsonl"
expect_error other-model "attribute 'model_parameters' is '1234567'.*mismatched provenance" "$work/other-model.h5"
expect_error other-length "short/fp32.h5: 40 steps, the reference" "$work/short/fp32.h5"
set +e; "$ampcheck" reference "$work/other-model.h5" --spread "seed:$runs/fp32-seed.h5" --out "$work/ref2.h5" 2> "$work/err.txt"; rc=$?; set -e
[ $rc = 2 ] && grep -q "mismatched provenance" "$work/err.txt" && [ ! -e "$work/ref2.h5" ] || { cat "$work/err.txt"; echo "FAIL: reference"; exit 1; }
[ "$(md5sum "$ref")" = "$ref_sum" ] || { echo "FAIL: the reference changed"; exit 1; }
# the CI recipe (ci/github-actions/ampcheck-judge.yml) run step by step as a runner would (its set-up step skipped: the
# build is there; training kept: the runs exist): a tracking run passes the job with summary.md in the job summary and
# the report uploaded; the same job on a run that clips before unscale_ fails, still with its summary and report.
export PATH=$(dirname "$(command -v "$python")"):$PATH
for case in pass fail; do
  wf=$work/wf-$case; mkdir -p "$wf/runs"; ln -s "$src" "$wf/ampcheck"
  cp "$runs"/fp32*.h5 "$wf/runs/"
  cp "$runs/$([ $case = pass ] && echo fp16-autocast-scaler || echo clip-before-unscale).h5" "$wf/runs/fp16-autocast-scaler.h5"
  "$python" "$src/harness/tests/run_workflow.py" "$src/ci/github-actions/ampcheck-judge.yml" judge --workdir "$wf" \
    --skip setup --env AMPCHECK="$ampcheck" RUNS="$wf/runs" REPORT="$wf/report" > "$wf/result.json" 2> "$wf/log.txt" \
    || { cat "$wf/log.txt"; echo "FAIL: run_workflow.py"; exit 1; }
  "$python" - "$wf/result.json" "$case" <<'PY'
import json, sys
r, case = json.load(open(sys.argv[1])), sys.argv[2]
steps = {s["id"]: s for s in r["steps"]}
upload = next(s for s in r["steps"] if (s["uses"] or "").startswith("actions/upload-artifact"))
assert steps["train"]["outcome"] == "success" and steps["judge"]["outcome"] == "success", steps
assert "| fp16-autocast-scaler |" in r["summary"].replace("  ", " ") or "fp16-autocast-scaler" in r["summary"], r["summary"]
assert upload["would_run"], upload
fail_step = next(s for s in r["steps"] if s["name"] == "Fail on FAIL")
if case == "pass":
    assert not r["failed"] and not fail_step["ran"] and "PASS" in r["summary"], r
else:
    assert r["failed"] and fail_step["outcome"] == "failure" and "FAIL" in r["summary"], r
print(f"workflow recipe, {case}: job {'failed' if r['failed'] else 'passed'}, summary {len(r['summary'])} chars, report uploaded")
PY
  [ -f "$wf/report/report.html" ] || { echo "FAIL: the workflow wrote no report.html"; exit 1; }
done
echo "pytorch example: correct runs track, the three bugs are caught, bad input refused"
