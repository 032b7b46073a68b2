#!/usr/bin/env bash
# The example's whole recipe: train the PyTorch-Python loop (examples/pytorch/train_amp.py) in FP32 with its five noise
# runs and in the given variants, build the FP32 reference, judge the variants. Exit code: ampcheck judge's (1 on FAIL).
#   bash examples/pytorch/judge.sh OUT_DIR [VARIANT...]     (default variant: fp16-autocast-scaler)
# Writes OUT_DIR/runs/<run>.h5 (kept when they exist; FORCE=1 retrains), OUT_DIR/reference.h5 and OUT_DIR/report/
# (both derived from the runs, rebuilt on every call).
# env: AMPCHECK (default build/ampcheck), PYTHON (default python3), STEPS (default 100).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: judge.sh OUT_DIR [VARIANT...]}; shift || true
variants=("${@:-fp16-autocast-scaler}")
ampcheck=${AMPCHECK:-$here/../../build/ampcheck}
python=${PYTHON:-python3}
keep=--keep; [ "${FORCE:-0}" = 1 ] && keep=--force
mkdir -p "$out/runs"
noise=(fp32-ulp+1 fp32-ulp-1 fp32-seed fp32-order fp32-skip)
"$python" "$here/train_amp.py" --out "$out/runs" --steps "${STEPS:-100}" $keep fp32 "${noise[@]}" "${variants[@]}"
# each spread run labelled with what it is (ulp nudges measure rounding chaos; the seed and order runs make the spread;
# the skip run measures what a one-step delay does)
kinds=(ulp ulp seed order skip)
spread=(); for i in "${!noise[@]}"; do spread+=("${kinds[$i]}:$out/runs/${noise[$i]}.h5"); done
runs=(); for v in "${variants[@]}"; do runs+=("$out/runs/$v.h5"); done
"$ampcheck" reference "$out/runs/fp32.h5" --spread "${spread[@]}" --out "$out/reference.h5" --force
"$ampcheck" judge "${runs[@]}" --reference "$out/reference.h5" --out "$out/report" --force
