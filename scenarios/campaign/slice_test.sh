#!/usr/bin/env bash
# The calibration campaign's fixed-seed slice (scenarios/campaign/README.md): 2 workloads drawn with seed 7, each
# with its correct mixed-precision setups and planted bugs, trained on the CPU against their FP32 references; then
# analyze.py --assert: no correct setup may fail, and every bug with a measurable effect must be caught (it prints
# the offending rows). ~2 minutes on 2 cores. Usage: slice_test.sh AMPCHECK SOURCE_DIR [PYTHON]
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d)
trap 'rc=$?; if [ $rc -eq 0 ]; then rm -rf "$work"; else echo "slice kept in $work"; fi; exit $rc' EXIT
"$python" "$src/scenarios/campaign/generate.py" --seed 7 --workloads 2 --out "$work/slice"
"$python" "$src/scenarios/campaign/run.py" "$work/slice" --ampcheck "$ampcheck" --jobs 2
"$python" "$src/scenarios/campaign/analyze.py" "$work/slice" --assert > "$work/slice/table.md"
