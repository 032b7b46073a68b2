#!/usr/bin/env bash
# `ampcheck validate` on the CPU (docs/VALIDATE.md): goldens recorded on this machine validate bit for bit; planted
# faults are caught naming step and tensor, a persistent flip replays as persistent, a transient one as transient; a
# low mantissa bit is caught bitwise and (honestly) not statistically; against the committed goldens of another CPU
# class (here: ATen's kernels forced to another capability) the difference is named and the statistical verdict passes.
# Usage: validate_cpu.sh AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
amp=$1; src=$2; py=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
row() {  # row SUMMARY FIELD: a field of the first row's validation object (or of the row)
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1]))['scenarios'][0]; v=r['validation']; print(v.get(sys.argv[2], r.get(sys.argv[2])))" "$1" "$2"
}
refs=$work/refs
mkdir -p "$refs"
cp -r "$src/references/cpu" "$refs/"

# 1. this machine's goldens, then the suite bit for bit
"$amp" validate --record --references "$refs" > "$work/record.log"
ls "$refs"/validate/cpu-*/validate-fp32-gpt.h5 > /dev/null || fail "no golden recorded"
"$amp" validate --record --references "$refs" > "$work/again.log" 2>&1 && fail "--record replaced a golden without --force"
grep -q "refusing to overwrite" "$work/again.log" || fail "no refusal named"
"$amp" validate --references "$refs" --out "$work/same" > "$work/same.log" || { cat "$work/same.log"; fail "the suite is not identical to this machine's goldens"; }
"$py" - "$work/same/summary.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["scenarios"]
assert len(rows) == 6, rows  # the validate suite: scenarios/suites/validate.yaml
for r in rows:
    v = r["validation"]
    assert v["mode"] == "bitwise" and v["identical"] and r["verdict"] == "identical", (r["name"], v)
    assert v["statistical_verdict"] == "tracks", (r["name"], v)
PY

# the words: one line per scenario with its mode and why, the result; no fault-like "first difference" on a pass;
# summary.md has the mode column
[ "$(grep -c '^VALIDATE .*: bitwise (the stack matches the cpu-[a-z0-9]* golden.s) — PASS: bit for bit' "$work/same.log")" = 6 ] ||
  { cat "$work/same.log"; fail "not one bitwise PASS line per scenario"; }
if grep '^VALIDATE' "$work/same.log" | grep -q "first difference"; then fail "a passing line speaks of a first difference"; fi
grep -q "| mode |" "$work/same/summary.md" && grep -q "| bitwise |" "$work/same/summary.md" || fail "summary.md has no mode column"

# 2. planted faults on the FP32 GPT: an exponent bit of one parameter element at step 10, persistent and transient
sc=$src/scenarios/validate/fp32-gpt.yaml
"$amp" validate "$sc" --references "$refs" --out "$work/persistent" --plant 'bitflip:param:h.0.mlp.c_fc.weight:0:30@10' > "$work/p.log" && fail "a persistent flip passed"
[ "$(row "$work/persistent/summary.json" replay)" = persistent ] || fail "persistent flip: replay $(row "$work/persistent/summary.json" replay)"
[ "$(row "$work/persistent/summary.json" first_step)" = 10 ] || fail "persistent flip: first step"
grep -q "first difference: step 10, parameter h.0.mlp.c_fc.weight" "$work/p.log" || { cat "$work/p.log"; fail "step and tensor not named"; }
"$amp" validate "$sc" --references "$refs" --out "$work/transient" --plant 'bitflip:param:h.0.mlp.c_fc.weight:0:30@10:transient' > "$work/t.log" && fail "a transient flip passed"
[ "$(row "$work/transient/summary.json" replay)" = transient ] || fail "transient flip: replay $(row "$work/transient/summary.json" replay)"
grep -q "reproduces the golden" "$work/t.log" || { cat "$work/t.log"; fail "the transient replay's finding is not said"; }
# the lowest mantissa bit: caught bitwise; the statistical verdict cannot see a rounding-sized change (k x FP32 noise)
"$amp" validate "$sc" --references "$refs" --out "$work/low" --plant 'bitflip:param:h.0.mlp.c_fc.weight:0:0@10' > "$work/l.log" && fail "a low-bit flip passed"
[ "$(row "$work/low/summary.json" statistical_verdict)" = tracks ] || fail "a lowest-mantissa-bit flip moved the statistical verdict"
rc=0; "$amp" validate "$sc" --references "$refs" --plant 'cosmic-ray' --out "$work/bad" > "$work/bad.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "unknown fault" "$work/bad.log" || fail "a bad --plant: exit $rc"

# 3. another CPU class: ATen's kernels forced to the default capability -> no golden of that class; the nearest
#    class's golden (this machine's, recorded above) is compared statistically, the difference named
ATEN_CPU_CAPABILITY=default "$amp" validate --references "$refs" --out "$work/other" > "$work/o.log" || { cat "$work/o.log"; fail "statistical validation against the nearest class failed"; }
[ "$(row "$work/other/summary.json" mode)" = statistical ] || fail "not statistical"
grep -q "aten_cpu_capability" "$work/other/summary.json" || fail "the capability difference is not named"
grep -q "^VALIDATE .*: statistical (no golden of class cpu-default for this scenario; .* — PASS: .*Next: record goldens for cpu-default on a known-good machine.*statistical mode catches only gross faults, not bit flips" "$work/o.log" ||
  { cat "$work/o.log"; fail "the statistical line does not say why and what to do next"; }
if grep -q "statistical — statistical\|^VALIDATE .*first difference" "$work/o.log"; then cat "$work/o.log"; fail "statistical wording"; fi
# 4. the committed goldens (recorded on another machine, or this one): bitwise where the stack matches, else
#    statistical with the differences named; either way PASS
"$amp" validate --out "$work/committed" > "$work/c.log" || { cat "$work/c.log"; fail "validate against the committed goldens failed"; }
"$py" - "$work/committed/summary.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["scenarios"]:
    v = r["validation"]
    assert v["golden"], (r["name"], "no committed golden found")
    assert (v["mode"] == "bitwise" and v["identical"]) or (v["mode"] == "statistical" and r["verdict"] == "tracks"), (r["name"], v)
    print(r["name"], v["mode"], v["stack_differences"][:120])
PY
echo "validate: OK"
