#!/usr/bin/env bash
# The Python package (python/, `pip install ./python`): installed into a fresh venv (with the system's torch, h5py,
# scikit-build-core and the pinned test packages visible; nothing downloaded: --no-index --no-build-isolation) from the
# build tree the tests run (AMPCHECK_PREBUILT_DIR: the package ships this build's `ampcheck` executable and
# ampcheck._native extension — one C++ build, not two), imported from outside the source tree. Then:
#  - its `ampcheck` command runs the packaged tool (no AMPCHECK_BIN, nothing on PATH) and, in a copy of the package
#    without its native part, says where it looked and what to do (exit 2); ampcheck.judge there raises AmpcheckError;
#  - the example loop recorded by the installed package; ampcheck.make_reference / judge in process against
#    `ampcheck reference` / `ampcheck judge` (harness/tests/python_api_cli_agree.py: the same rows, exactly);
#  - its pytest suite (the HF Trainer integration against the real transformers / accelerate, crash-safe recording)
#    with the venv's python.
# Usage: python_package.sh AMPCHECK SOURCE_DIR PYTHON   (AMPCHECK: <build>/ampcheck, beside python/ampcheck/_native*)
set -euo pipefail
amp=$1; src=$2; py=$3
build=$(cd "$(dirname "$amp")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# (no pip of its own: ensurepip is most of a venv's creation time; the system's pip, seen through
# --system-site-packages and run by the venv's python, installs into the venv — the checks below say where)
"$py" -m venv --system-site-packages --without-pip "$work/venv"
v="$work/venv/bin"
# the package build's own directory is the test's (build-dir): nothing is written into the source checkout
( time "$v/python" -m pip install -q --no-index --no-build-isolation --no-deps "$src/python" \
    --config-settings=build-dir="$work/package-build" \
    --config-settings=cmake.define.AMPCHECK_PREBUILT_DIR="$build" ) 2> "$work/pip.time" ||
  { cat "$work/pip.time"; fail "pip install ./python"; }
echo "pip install ./python (the tests' build packaged): $(grep real "$work/pip.time")"
cd "$work"
read -r where version < <("$v/python" -c 'import ampcheck, os; print(os.path.dirname(ampcheck.__file__), ampcheck.__version__)')
case "$where" in "$work/venv/"*) ;; *) fail "ampcheck imported from $where, not the venv";; esac
[ -x "$v/ampcheck" ] || fail "no ampcheck console command in the venv"
[ -x "$where/bin/ampcheck" ] || fail "no ampcheck executable in the installed package ($where/bin)"
ls "$where"/_native*.so > /dev/null || fail "no extension module ampcheck._native in the installed package"
[ -n "$version" ] || fail "no ampcheck.__version__"
grep -q "project(ampcheck VERSION $version" "$src/CMakeLists.txt" || fail "ampcheck.__version__ $version is not CMake's"
# the console command runs the packaged tool: no AMPCHECK_BIN, nothing else on PATH
unset AMPCHECK_BIN
PATH="$v:/usr/bin:/bin" "$v/ampcheck" --help > help.log 2>&1 || { cat help.log; fail "ampcheck --help (packaged tool)"; }
# a package without its native part: where it looked, in words, and a HINT; ampcheck.judge raises AmpcheckError
# (both in one process: the package's import is torch's, seconds)
mkdir bare && cp -r "$where" bare/ampcheck && rm -rf bare/ampcheck/bin bare/ampcheck/_native*.so
rc=0; PATH="/usr/bin:/bin" "$v/python" -c 'import contextlib, sys; sys.path.insert(0, "bare"); from ampcheck.cli import main
with open("none.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    rc = main(["--help"])
import ampcheck
import os
assert os.path.abspath(ampcheck.__file__).startswith(os.path.abspath("bare") + "/"), ampcheck.__file__
try:
    ampcheck.judge("run.h5", "ref.h5")
except ampcheck.AmpcheckError as e:
    assert "native core" in str(e) and "Looked in the installed package" in str(e) and "HINT" in str(e), e
else:
    raise SystemExit("no AmpcheckError without the native core")
sys.exit(rc)' > judge-none.log 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "was not found. Looked for:" none.log && grep -q "the tool installed with this package: " none.log &&
  grep -q "HINT: " none.log || { cat none.log judge-none.log; fail "no tool: exit $rc (or ampcheck.judge without the native core)"; }
echo "without the native part: the command and ampcheck.judge say where they looked: PASS"
# the example loop recorded with the installed package: three FP32 runs, a correct fp16 run and two planted bugs (one
# process, as the example's own judge.sh trains them: one torch import, not six)
mkdir -p runs
"$v/python" - "$src/examples/pytorch/train_amp.py" fp32 fp32-seed fp32-skip fp16-autocast-scaler clip-before-unscale \
  update-forgotten <<'PY' > /dev/null
import runpy, sys
script, runs = sys.argv[1], sys.argv[2:]
sys.argv = [script, "--out", "runs", "--steps", "60"] + runs
sys.path = [p for p in sys.path if not p.endswith("/python/src")]   # the installed package, not the source tree's
runpy.run_path(script, run_name="__main__")
PY
"$v/ampcheck" reference runs/fp32.h5 --spread seed:runs/fp32-seed.h5 skip:runs/fp32-skip.h5 --out ref.h5 > ref.log ||
  { cat ref.log; fail "ampcheck reference through the installed command"; }
"$v/ampcheck" judge runs/fp16-autocast-scaler.h5 --reference ref.h5 --out report > judge.log ||
  { cat judge.log; fail "ampcheck judge through the installed command"; }
grep -q "1 passed, 0 failed" judge.log || { cat judge.log; fail "the example's fp16 run did not pass"; }
echo "installed command: example recorded, reference built, fp16 autocast + GradScaler judged: PASS"
# (the command line there: the packaged tool itself — the console command execs it (cli.main: os.execv), and each
# of its runs would import torch first, seconds; the console command's own runs are the three above)
mkdir api && "$v/python" "$src/harness/tests/python_api_cli_agree.py" "$where/bin/ampcheck" "$work/runs" "$work/api" \
  fp32 fp32-seed fp32-skip fp16-autocast-scaler clip-before-unscale update-forgotten
cd "$src/python"
export AMPCHECK_BIN="$where/bin/ampcheck" PATH="$v:$PATH"  # the suite's judging: the packaged tool
# (the sweep-plan tests run as their own CTest, cpu.python_sweep_plans; the recorder's as unit.python_recorder)
"$v/python" -m pytest -q -p no:cacheprovider tests --ignore=tests/test_plan.py --ignore=tests/test_recorder.py \
  --ignore=tests/test_plan_integrations.py --ignore=tests/test_preflight.py \
  --ignore=tests/test_guard.py --ignore=tests/test_distributed.py \
  --ignore=tests/test_private_runtime.py --ignore=tests/test_api_arguments.py  # (their own CTests: cpu.python_guard,
# _distributed, _native_safety)
