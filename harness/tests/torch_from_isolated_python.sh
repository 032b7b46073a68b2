#!/usr/bin/env bash
# Issue 51: a plain `pip install ./python` builds under pip's build isolation — the same interpreter with its
# site-packages hidden behind an overlay (PYTHONPATH with a sitecustomize that drops them, PYTHONNOUSERSITE=1). The
# package's CMake must still find the torch the package will run with (cmake/FindTorchFromPython.cmake), not fail with
# "could not import torch". Here such an overlay is made by hand and the module included in CMake's script mode.
# Usage: torch_from_isolated_python.sh SRC PYTHON
set -euo pipefail
SRC=$1 PY=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/overlay"
cat > "$work/overlay/sitecustomize.py" <<'PYEOF'
import sys
sys.path[:] = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
PYEOF
if PYTHONNOUSERSITE=1 PYTHONPATH="$work/overlay" "$PY" -c "import torch" 2>/dev/null; then
  echo "FAIL: the overlay does not hide torch (the test would prove nothing)"; exit 1
fi
cat > "$work/find.cmake" <<CMEOF
set(Python_EXECUTABLE "$PY")
include("$SRC/cmake/FindTorchFromPython.cmake")
message(STATUS "torch prefix: \${CMAKE_PREFIX_PATH}")
CMEOF
out=$(PYTHONNOUSERSITE=1 PYTHONPATH="$work/overlay" cmake -P "$work/find.cmake" 2>&1) || { echo "FAIL: $out"; exit 1; }
want=$("$PY" -c "import torch; print(torch.utils.cmake_prefix_path)")
grep -qF "torch prefix: $want" <<< "$out" || { echo "FAIL: expected the prefix $want, got: $out"; exit 1; }
echo "PASS: under an isolation overlay the build finds $want"
