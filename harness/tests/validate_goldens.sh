#!/usr/bin/env bash
# `ampcheck validate` blames the machine only when the machine is at fault (docs/VALIDATE.md, "Bad input and drift"):
#  1. the golden corruption study: random 1-4-bit flips anywhere in copies of a golden file (seeded) -> each run is
#     either identical (the flip hit nothing the comparison reads) or bad input (exit 2, the golden named); the tally is
#     printed and none may be blamed on the machine;
#  2. another scenario's golden, a stale golden (the scenario's lr changed), a shorter run (--steps), a missing /
#     file / golden-less --references -> exit 2 before any training;
#  3. plants that cannot act (malformed, no parameter matched, element / bit / step out of range) -> exit 2 before any
#     training; a plant absorbed by the update -> "had no measurable effect";
#  4. each numerics setting of the environment (MKL, oneDNN, OpenMP, cuBLAS, NVIDIA, NCCL) -> named as configuration
#     drift, never "persistent difference (software or hardware)", and the run passes.
# The goldens are recorded here first: FP32 bits are never assumed equal across machines.
# Usage: validate_goldens.sh AMPCHECK SOURCE_DIR PYTHON [FLIPS]
set -euo pipefail
amp=$1; src=$2; py=$3; flips=${4:-16}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AMPCHECK_READ_TIMEOUT_S=20  # a flip that makes HDF5 loop is an unreadable golden after 20 s, not a hang
fail() { echo "FAIL: $*"; exit 1; }
sc=$src/scenarios/validate/fp32-mlp-sgd.yaml
short=8  # the study's goldens and runs: 8 steps of the MLP (a second each)

refs=$work/refs
mkdir -p "$refs"
cp -r "$src/references/cpu" "$refs/"  # the FP32 references, for the statistical verdict under drift
"$amp" validate "$sc" --record --references "$refs" > "$work/record.log" || { cat "$work/record.log"; fail "record"; }
golden=$(ls "$refs"/validate/cpu-*/validate-fp32-mlp-sgd.h5)
cls=$(basename "$(dirname "$golden")")
grep -q "fnv1a64:" "$work/record.log" || fail "the golden was not recorded with its checksum"
short_refs=$work/short-refs
mkdir -p "$short_refs"
"$amp" validate "$sc" --record --steps $short --references "$short_refs" > "$work/record-short.log"
"$amp" validate "$sc" --steps $short --references "$short_refs" --out "$work/clean" > "$work/clean.log" ||
  { cat "$work/clean.log"; fail "the clean short run is not identical to its golden"; }

# expect_bad LABEL WORD COMMAND...: exit 2, WORD in the output, and nothing trained (no "[1/1]" line)
expect_bad() {
  local label=$1 word=$2 rc=0
  shift 2
  "$@" > "$work/bad.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] || { cat "$work/bad.log"; fail "$label: exit $rc, expected 2 (bad input)"; }
  grep -qF -- "$word" "$work/bad.log" || { cat "$work/bad.log"; fail "$label: '$word' not named"; }
  if grep -q '^\[1/' "$work/bad.log"; then cat "$work/bad.log"; fail "$label: trained before refusing"; fi
  echo "bad input, exit 2 before training: $label"
}

# ---- 1. the corruption study
"$py" - "$amp" "$sc" "$short_refs" "$cls" "$work" "$flips" "$short" <<'PY'
import json, os, random, shutil, subprocess, sys
amp, sc, refs, cls, work, flips, steps = sys.argv[1:8]
golden = os.path.join(refs, "validate", cls, "validate-fp32-mlp-sgd.h5")
data = open(golden, "rb").read()
rng = random.Random(39)  # seeded: the same flips every run
tally = {"identical": 0, "bad input": 0, "blamed": 0}
for i in range(int(flips)):
    d = os.path.join(work, f"flip{i}")
    gdir = os.path.join(d, "refs", "validate", cls)
    os.makedirs(gdir)
    b = bytearray(data)
    where = []
    for _ in range(rng.randint(1, 4)):
        bit = rng.randrange(len(b) * 8)
        b[bit // 8] ^= 1 << (bit % 8)
        where.append(bit // 8)
    path = os.path.join(gdir, os.path.basename(golden))
    open(path, "wb").write(bytes(b))
    r = subprocess.run([amp, "validate", sc, "--steps", steps, "--references", os.path.join(d, "refs"),
                        "--out", os.path.join(d, "out")], capture_output=True)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    summary = os.path.join(d, "out", "summary.json")
    row = json.load(open(summary))["scenarios"][0] if r.returncode == 0 and os.path.exists(summary) else None
    if row and row["validation"]["mode"] == "bitwise" and row["validation"]["identical"]:
        kind = "identical"
    elif r.returncode == 2 and path in out and "[1/1]" not in out:
        kind = "bad input"
    else:
        kind = "blamed"
        print(f"flip {i} (bytes {where}): exit {r.returncode}\n{out[-1500:]}")
    tally[kind] += 1
    last = [l for l in out.splitlines() if l.strip()][-1] if out.strip() else ""
    print(f"flip {i:2d}: bytes {where} -> {kind}: {last[:150]}")
    shutil.rmtree(d)
print(f"golden corruption study: {flips} flipped copies of {len(data)}-byte golden -> "
      f"{tally['identical']} identical, {tally['bad input']} bad input (exit 2, file named), {tally['blamed']} blamed")
assert tally["blamed"] == 0, tally
PY

# ---- 2. foreign, stale and short goldens; a reference root that is missing, a file, or holds no goldens
foreign=$work/foreign
mkdir -p "$foreign/validate/$cls"
cp "$golden" "$foreign/validate/$cls/validate-fp32-gpt.h5"  # the MLP's golden where the GPT's belongs
expect_bad "another scenario's golden" "golden of scenario 'validate-fp32-mlp-sgd'" \
  "$amp" validate "$src/scenarios/validate/fp32-gpt.yaml" --references "$foreign" --out "$work/o"
sed 's/lr: 0.05/lr: 0.06/' "$sc" > "$work/stale.yaml"
grep -q "lr: 0.06" "$work/stale.yaml" || fail "the stale scenario was not made"
expect_bad "a stale golden (lr changed)" "another configuration" \
  "$amp" validate "$work/stale.yaml" --references "$refs" --out "$work/o"
grep -q "golden lr=0.05.*here lr=0.0[56]" "$work/bad.log" || fail "the stale golden's changed field is not named"
expect_bad "--steps 10 against a 40-step golden" "golden of 40 steps" \
  "$amp" validate "$sc" --steps 10 --references "$refs" --out "$work/o"
grep -q "re-run to regenerate" "$work/bad.log" && fail "a golden's HINT speaks of regenerating it"
expect_bad "--references missing" "does not exist" "$amp" validate "$sc" --references "$work/nowhere" --out "$work/o"
touch "$work/a-file"
expect_bad "--references a file" "is not a directory" "$amp" validate "$sc" --references "$work/a-file" --out "$work/o"
mkdir -p "$work/no-goldens/validate"
cp -r "$src/references/cpu" "$work/no-goldens/"
expect_bad "--references without goldens" "holds no goldens" \
  "$amp" validate "$sc" --references "$work/no-goldens" --out "$work/o"

# ---- 3. plants
for plant in 'bitflip:param:fc.0.weight:0:3@ 5' 'bitflip:param:fc.0.weight:0:3@-0' 'bitflip:param:fc.0.weight:+3:3@5'; do
  expect_bad "malformed plant '$plant'" "$plant" "$amp" validate "$sc" --references "$refs" --plant "$plant" --out "$work/o"
done
expect_bad "a glob that matches nothing" "matches no parameter" \
  "$amp" validate "$sc" --references "$refs" --plant 'bitflip:param:h.*.c_attn.bias:0:3@5' --out "$work/o"
expect_bad "an element past the tensor" "is past fc.0.bias" \
  "$amp" validate "$sc" --references "$refs" --plant 'bitflip:param:fc.0.bias:128:3@5' --out "$work/o"
expect_bad "bit 40 of fp32" "bit 40" \
  "$amp" validate "$sc" --references "$refs" --plant 'bitflip:grad:fc.0.bias:0:40@5' --out "$work/o"
expect_bad "a step past the run" "past the run" \
  "$amp" validate "$sc" --references "$refs" --plant 'bitflip:grad:fc.0.bias:0:3@40' --out "$work/o"
# a low exponent bit of a zero bias, flipped after backward at step 0: 1.4e-42, absorbed by the update
"$amp" validate "$sc" --steps $short --references "$short_refs" --plant 'bitflip:param:fc.0.bias:0:10@0' \
  --out "$work/absorbed" > "$work/absorbed.log" || { cat "$work/absorbed.log"; fail "an absorbed plant"; }
grep -q "the plant at step 0 had no measurable effect" "$work/absorbed.log" ||
  { cat "$work/absorbed.log"; fail "an absorbed plant is not said to have had no effect"; }
echo "an absorbed plant: reported as having had no measurable effect"

# ---- 4. numerics settings of the environment: drift, named, never a fault
for setting in MKL_CBWR=COMPATIBLE MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=2 \
               MKL_NUM_THREADS=2 CUBLAS_WORKSPACE_CONFIG=:16:8 NVIDIA_TF32_OVERRIDE=0 NCCL_ALGO=Tree \
               NCCL_PROTO=Simple CUBLASLT_ALLOW_TF32=1; do
  name=${setting%%=*}
  rc=0
  env "$setting" "$amp" validate "$sc" --references "$refs" --out "$work/drift-$name" > "$work/drift.log" 2>&1 || rc=$?
  line=$(grep "^VALIDATE " "$work/drift.log" || true)
  [ $rc -eq 0 ] || { cat "$work/drift.log"; fail "$setting: exit $rc"; }
  echo "$line" | grep -qF "env $name: " || { cat "$work/drift.log"; fail "$setting: not named"; }
  if grep -qE "persistent difference|transient fault" "$work/drift.log"; then
    cat "$work/drift.log"; fail "$setting: blamed on the machine"
  fi
  echo "drift named: $setting -> ${line:0:220}"
done
echo "validate goldens: OK"
