#!/usr/bin/env bash
# The sanitizer slice (docs/ROBUSTNESS.md): configures and builds the `sanitize` preset (clang, ASan + UBSan, the
# libFuzzer targets; build-sanitize/) and runs CTest label `sanitize` — every unit test that runs the build's code, a
# slice of the cpu tests and the fuzz smoke (each fuzz target FUZZ_SECONDS, default 5). Part of ci/test.sh;
# `ctest --preset sanitize-all` after it runs every test under the sanitizers. Needs `ci/setup.sh --with-sanitizers`.
# `--build-only` configures and builds, `--test-only` runs the tests of a build made before (ci/test.sh builds it in the
# background while the Release tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
build=1 test=1
case "${1:-}" in
  "") ;;
  --build-only) test=0 ;;
  --test-only) build=0 ;;
  *) echo "ci/sanitize.sh: unknown option '$1' (known: --build-only --test-only)" >&2; exit 2 ;;
esac
if [ $build = 0 ]; then
  [ -f build-sanitize/CMakeCache.txt ] || { echo "ci/sanitize.sh --test-only: no build in build-sanitize/" >&2; exit 1; }
elif [ ! -f build-sanitize/CMakeCache.txt ]; then
  log=$(mktemp)
  # a fixed libFuzzer seed (FUZZ_SEED=0: random): CI judges every push on the same fuzz inputs
  cmake --preset sanitize -DAMPCHECK_FUZZ_SECONDS="${FUZZ_SECONDS:-5}" -DAMPCHECK_FUZZ_SEED="${FUZZ_SEED:-39}" > "$log" 2>&1 ||
    { cat "$log"; exit 1; }
  rm -f "$log"
fi
if [ $build = 1 ]; then cmake --build build-sanitize -j "${JOBS:-$(nproc)}"; fi
if [ $test = 1 ]; then ctest --preset sanitize; fi
