#!/usr/bin/env bash
# The Python package (python/, `pip install ./python`): installed into a fresh venv (with the system's torch, h5py and
# the pinned test packages visible; nothing downloaded: --no-index --no-build-isolation), imported from outside the
# source tree, its `ampcheck` command running the C++ tool (AMPCHECK_BIN) to build a reference and judge the example
# loop's runs recorded by the installed package, and refusing with a HINT where no tool is found; then its pytest
# suite (the HF Trainer integration against the real transformers / accelerate, crash-safe recording) with the
# venv's python. Usage: python_package.sh AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
amp=$1; src=$2; py=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$py" -m venv --system-site-packages "$work/venv"
v="$work/venv/bin"
cp -r "$src/python" "$work/python-src"  # setuptools builds in the tree it is given: not in the source checkout
rm -rf "$work/python-src/build" "$work/python-src"/*.egg-info
( time "$v/pip" install -q --no-index --no-build-isolation --no-deps "$work/python-src" ) 2> "$work/pip.time" ||
  fail "pip install ./python"
echo "pip install ./python: $(grep real "$work/pip.time")"
cd "$work"
where=$("$v/python" -c 'import ampcheck, os; print(os.path.dirname(ampcheck.__file__))')
case "$where" in "$work/venv/"*) ;; *) fail "ampcheck imported from $where, not the venv";; esac
[ -x "$v/ampcheck" ] || fail "no ampcheck console command in the venv"
# the installed command without a tool to run: exit 2 and a HINT
rc=0; env -u AMPCHECK_BIN PATH="$v:/usr/bin:/bin" "$v/ampcheck" --help > "$work/none.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "HINT: build it" "$work/none.log" || { cat "$work/none.log"; fail "no tool: exit $rc"; }
# the example loop recorded with the installed package, then reference + judge through the installed command
mkdir -p runs
for r in fp32 fp32-seed fp32-skip fp16-autocast-scaler; do
  "$v/python" - "$src/examples/pytorch/train_amp.py" "$r" <<'PY' > /dev/null
import runpy, sys
script, run = sys.argv[1], sys.argv[2]
sys.argv = [script, "--out", "runs", "--steps", "60", run]
sys.path = [p for p in sys.path if not p.endswith("/python")]   # the installed package, not the source tree's
runpy.run_path(script, run_name="__main__")
PY
done
export AMPCHECK_BIN=$amp
"$v/ampcheck" reference runs/fp32.h5 --spread seed:runs/fp32-seed.h5 skip:runs/fp32-skip.h5 --out ref.h5 > ref.log ||
  { cat ref.log; fail "ampcheck reference through the installed command"; }
"$v/ampcheck" judge runs/fp16-autocast-scaler.h5 --reference ref.h5 --out report > judge.log ||
  { cat judge.log; fail "ampcheck judge through the installed command"; }
grep -q "1 passed, 0 failed" judge.log || { cat judge.log; fail "the example's fp16 run did not pass"; }
echo "installed package: example recorded, reference built, fp16 autocast + GradScaler judged: PASS"
cd "$src/python"
# (the sweep-plan tests run as their own CTest, cpu.python_sweep_plans)
"$v/python" -m pytest -q -p no:cacheprovider tests --ignore=tests/test_plan.py \
  --ignore=tests/test_plan_integrations.py --ignore=tests/test_preflight.py
