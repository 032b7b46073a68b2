#!/usr/bin/env bash
# `ampcheck reference` + `ampcheck judge` end to end on runs written outside `check`: three FP32 runs of the micro
# GPT (seeds 1337, 1338, 1339) make a reference; the correct fp16 autocast + GradScaler run tracks it (also as JSON
# lines holding only loss and grad norm, which says what it could not judge); a forgotten zero_grad fails with the
# signal that fired; a run of another length, an existing reference and existing reports without --force are refused,
# and so are a spread of ulp runs only and a spread run whose kind is unknown.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for seed in 1338 1339; do
  sed "s/^name: fp32$/name: fp32-seed$seed/; s/^seed: 1337$/seed: $seed/" "$src/scenarios/fp32.yaml" > "$work/fp32-seed$seed.yaml"
  grep -q "seed: $seed" "$work/fp32-seed$seed.yaml"
done
"$ampcheck" run "$src/scenarios/fp32.yaml" "$work/fp32-seed1338.yaml" "$work/fp32-seed1339.yaml" \
  "$src/scenarios/fp16-autocast-scaler.yaml" "$src/scenarios/zero-grad-forgotten.yaml" --device cpu --out "$work/runs" > "$work/run.log"
"$ampcheck" run "$src/scenarios/fp16-autocast-scaler.yaml" --steps 30 --device cpu --out "$work/short" > /dev/null
r=$work/runs
# a spread of ±1-ulp runs only, or a run whose kind nobody said, is refused (exit 2) with a HINT, nothing written
"$ampcheck" run "$src/scenarios/fp32.yaml" --device cpu --out "$work/again" > /dev/null
set +e
"$ampcheck" reference "$r/fp32.h5" --spread "ulp:$work/again/fp32.h5" --out "$work/ulp-ref.h5" 2> "$work/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -q "every spread run is an ulp nudge" "$work/err.txt" && grep -q "HINT" "$work/err.txt" && [ ! -e "$work/ulp-ref.h5" ] \
  || { cat "$work/err.txt"; echo "FAIL: an ulp-only spread was not refused (rc $rc)"; exit 1; }
set +e
"$ampcheck" reference "$r/fp32.h5" --spread "$r/fp32-seed1338.h5" --out "$work/unlabelled.h5" 2> "$work/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -q "fp32-seed1338.h5: what kind of spread run is this" "$work/err.txt" && [ ! -e "$work/unlabelled.h5" ] \
  || { cat "$work/err.txt"; echo "FAIL: an unlabelled spread run was not refused (rc $rc)"; exit 1; }
"$ampcheck" reference "$r/fp32.h5" --spread "seed:$r/fp32-seed1338.h5" "seed:$r/fp32-seed1339.h5" --out "$work/ref.h5"
"$python" -c "import h5py,sys; f=h5py.File(sys.argv[1]); assert sorted(f['noise']) == ['seed', 'seed-2'], list(f['noise'])" "$work/ref.h5"
sum_before=$(md5sum "$work/ref.h5")
if "$ampcheck" reference "$r/fp32.h5" --spread "seed:$r/fp32-seed1338.h5" --out "$work/ref.h5" 2> "$work/err.txt"; then
  echo "FAIL: an existing reference was replaced without --force"; exit 1
fi
grep -q "refusing to overwrite" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: no clear error"; exit 1; }
[ "$(md5sum "$work/ref.h5")" = "$sum_before" ] || { echo "FAIL: the reference changed"; exit 1; }
# JSON lines with only loss and grad_norm, as a minimal recorder would write them
"$python" - "$r/fp16-autocast-scaler.h5" "$work/fp16-minimal.jsonl" <<'PY'
import h5py, json, sys
f = h5py.File(sys.argv[1])
with open(sys.argv[2], "w") as out:
    out.write(json.dumps({"format": "ampcheck-trajectory", "format_version": 1}) + "\n")
    for s, (l, g) in enumerate(zip(f["steps/loss"][:], f["steps/grad_norm"][:])):
        out.write(json.dumps({"step": s, "loss": float(l), "grad_norm": float(g)}) + "\n")
PY
"$ampcheck" judge "$r/fp16-autocast-scaler.h5" "$work/fp16-minimal.jsonl" --reference "$work/ref.h5" --out "$work/ok" \
  > "$work/ok.log" || { cat "$work/ok.log"; echo "FAIL: the correct fp16 run did not track"; exit 1; }
grep -q "not recorded, not judged: .*update_norm" "$work/ok/summary.json" || { cat "$work/ok/summary.json"; echo "FAIL: unjudged columns not named"; exit 1; }
# ... and on the terminal, with what goes unseen without them (not only in summary.json)
grep -q "WARN fp16-minimal (not_recorded): not recorded, not judged: update_norm.* go unseen without them" "$work/ok.log" \
  || { cat "$work/ok.log"; echo "FAIL: the terminal does not say which signals were not checked"; exit 1; }
if "$ampcheck" judge "$r/zero-grad-forgotten.h5" --reference "$work/ref.h5" --out "$work/bad" > "$work/bad.log"; then
  cat "$work/bad.log"; echo "FAIL: a forgotten zero_grad passed"; exit 1
fi
"$python" - "$work/bad/summary.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))["scenarios"][0]
assert z["verdict"] != "tracks" and not z["pass"] and z["deciding_signal"], z
print("zero_grad forgotten:", z["verdict"], "by", z["deciding_signal"])
PY
# --tolerance overrides a constant (a calibration sweep): at k = 1000 the forgotten zero_grad's deviation is allowed;
# a bad override is refused before anything is written
"$ampcheck" judge "$r/zero-grad-forgotten.h5" --reference "$work/ref.h5" --out "$work/wide" --tolerance k=1000 \
  > "$work/wide.log" || { cat "$work/wide.log"; echo "FAIL: --tolerance k=1000 did not widen the allowance"; exit 1; }
for bad in window=0.5 k=abc foo=1; do
  set +e; "$ampcheck" judge "$r/zero-grad-forgotten.h5" --reference "$work/ref.h5" --out "$work/bad-tol" \
    --tolerance "$bad" > /dev/null 2> "$work/err.txt"; rc=$?; set -e
  [ $rc = 2 ] && grep -q -- "--tolerance $bad: expected" "$work/err.txt" && [ ! -e "$work/bad-tol" ] \
    || { cat "$work/err.txt"; echo "FAIL: --tolerance $bad not refused up front (rc $rc)"; exit 1; }
done
set +e; "$ampcheck" reference "$r/fp32.h5" --spread "seed:" --out "$work/empty.h5" 2> "$work/err.txt"; rc=$?; set -e
[ $rc = 2 ] && grep -q "expected \[KIND:\]FILE" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: empty spread label"; exit 1; }
# a run of another length is refused before anything is written; so are existing reports without --force
set +e
"$ampcheck" judge "$r/fp16-autocast-scaler.h5" "$work/short/fp16-autocast-scaler.h5" --reference "$work/ref.h5" \
  --out "$work/short-judged" > /dev/null 2> "$work/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -q "30 steps, the reference" "$work/err.txt" && [ ! -e "$work/short-judged" ] \
  || { cat "$work/err.txt"; echo "FAIL: a short run was not refused up front (rc $rc)"; exit 1; }
sum_before=$(md5sum "$work/bad/summary.json")
if "$ampcheck" judge "$r/fp16-autocast-scaler.h5" --reference "$work/ref.h5" --out "$work/bad" > /dev/null 2> "$work/err.txt"; then
  echo "FAIL: existing reports were replaced without --force"; exit 1
fi
grep -q "bad: exists; refusing to overwrite" "$work/err.txt" && [ "$(md5sum "$work/bad/summary.json")" = "$sum_before" ] \
  || { cat "$work/err.txt"; echo "FAIL: no clear error, or the reports changed"; exit 1; }
[ -f "$work/ok/report.html" ] && [ -f "$work/ok/junit.xml" ] || { echo "FAIL: reports missing"; exit 1; }
# nothing judged silently less: a run whose grad columns are present but NaN at every step (a recorder that saw no
# grads: step() after zero_grad without its backward hooks) is named on the terminal and in the reports, as a warning;
# --strict fails on it. A run claiming fp16 that is FP32 bit for bit (here the FP32 run itself) gets a precision warning.
"$python" - "$r/fp16-autocast-scaler.h5" "$work/no-grads.h5" <<'PY'
import h5py, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    for c in ("grad_norm", "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad"):
        f["steps"][c][...] = float("nan")
    f.attrs["steps_without_grads"] = str(len(f["steps/loss"]))
PY
"$ampcheck" judge "$work/no-grads.h5" --reference "$work/ref.h5" --out "$work/warn" > "$work/warn.log" \
  || { cat "$work/warn.log"; echo "FAIL: a run with unjudged columns failed without --strict"; exit 1; }
grep -q "WARN no-grads (not_judged): grad_norm not judged: every value NaN — was step() called after zero_grad()?" "$work/warn.log" \
  && grep -q "WARN no-grads (not_judged): the recorder saw no grads at 60 step(s)" "$work/warn.log" \
  && grep -q 'ampcheck.warning.not_judged' "$work/warn/junit.xml" \
  || { cat "$work/warn.log"; echo "FAIL: unjudged grad columns not named"; exit 1; }
if "$ampcheck" judge "$work/no-grads.h5" --reference "$work/ref.h5" --out "$work/warn-strict" --strict > "$work/strict.log"; then
  cat "$work/strict.log"; echo "FAIL: --strict passed a run with warnings"; exit 1
fi
"$ampcheck" judge "$r/fp32.h5" --strategy fp16-autocast --reference "$work/ref.h5" --out "$work/precision" > "$work/precision.log"
grep -q "WARN fp32 (precision): mixed precision not in effect: the loss is bit-identical" "$work/precision.log" \
  || { cat "$work/precision.log"; echo "FAIL: an FP32 run claiming fp16 was not named"; exit 1; }
# FP8 training layers (torchao's Float8Linear: float32 parameters, autocast off; attribute float8_linears) are FP8 in
# effect: no "the strategy says fp8 but the recorder saw float32 parameters" — which a run without them still gets
for n in 0 2; do
  "$python" - "$r/fp32.h5" "$work/fp8-layers-$n.h5" "$n" <<'PY'
import h5py, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    f.attrs["autocast_dtype"], f.attrs["param_dtype"], f.attrs["float8_linears"] = "none", "float32", sys.argv[3]
PY
  "$ampcheck" judge "$work/fp8-layers-$n.h5" --strategy fp8 --reference "$work/ref.h5" --out "$work/fp8-$n" > "$work/fp8-$n.log" || true
done
grep -q "the strategy says fp8 but the recorder saw float32 parameters" "$work/fp8-0.log" \
  && ! grep -q "the strategy says fp8 but the recorder saw float32 parameters" "$work/fp8-2.log" \
  || { cat "$work/fp8-0.log" "$work/fp8-2.log"; echo "FAIL: FP8 layers over float32 parameters named not in effect"; exit 1; }
echo "judge: reference built, correct runs track, bugs and bad input refused"
