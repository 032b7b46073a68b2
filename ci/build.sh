#!/usr/bin/env bash
# Configures and builds ampcheck into ${BUILD_DIR:-build} (Release, Ninja when present). Used by main.sh, test.sh
# and gpu.sh. AMPCHECK_PYTHON picks the python whose torch provides LibTorch (default python3); BUILD_TARGETS (a
# space-separated list) builds only those targets instead of all.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  # CMAKE_POLICY_VERSION_MINIMUM: CMake >= 4 refuses package configs that still declare very old minimums.
  cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "$@"
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
