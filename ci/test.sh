#!/usr/bin/env bash
# The test command: installs what is missing (ci/setup.sh), checks the C++ formatting (ci/format_check.sh), builds,
# and runs every CTest test (labels unit, cpu, gpu; where there is no GPU the gpu tests, which would only skip, are
# left out but one, which shows the skip) plus the `ci`
# suite through the CLI, and report.html in headless Chromium. The tests of the sanitizer slice (label sanitize: the
# unit tests that run the build's code and a cpu slice) run in the sanitizer build instead (ci/sanitize.sh: ASan +
# UBSan, with the fuzz smoke); SANITIZE=0 runs them here and builds no sanitizer build. Label extended (longer
# variants: `ctest -L extended`) is not run here.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
stamp() { echo "[test] $(date -u +%T) (+$((SECONDS - t0)) s) $*"; }  # where the time goes, stage by stage
bash ci/setup.sh --with-browser --with-python-tests --with-sanitizers
stamp "set-up done"
gpu=0; nvidia-smi -L > /dev/null 2>&1 && gpu=1
if [ "${SANITIZE:-1}" != 0 ] && [ $gpu = 0 ]; then
  # No GPU: the sanitizer build compiles from here on in the background, at the lowest priority (nice 19, in a session
  # of its own whose autogroup is niced too: the kernel weighs sessions against each other before nice values). It
  # takes only the CPU the work in front leaves idle — the format check, the Release build's single-threaded configure,
  # its precompiled header and last files, the Release tests' sleeps, waits on timeouts and I/O, the last test's lone
  # core — then all of it once the Release tests end. Its log is printed when it is waited for; a failed sanitizer
  # build fails this command (after the Release tests); a failure before that stops it.
  san_log=$(mktemp) san_pidfile=$(mktemp)
  setsid -w bash -c 'echo $$ > "$1"; echo 19 > /proc/self/autogroup 2> /dev/null || true
    exec nice -n 19 bash ci/sanitize.sh --build-only' sanitize-build "$san_pidfile" > "$san_log" 2>&1 &
  san_pid=$!
  stop_sanitize_build() {  # its whole session (ninja and the compilers), where it still runs
    local sid="" i
    for i in $(seq 50); do  # (a failure in the first moments: until it has written its session id)
      sid=$(cat "$san_pidfile" 2> /dev/null || true)
      if [ -n "$sid" ] || ! kill -0 "$san_pid" 2> /dev/null; then break; fi
      sleep 0.1
    done
    [ -z "$sid" ] || kill -- "-$sid" 2> /dev/null || true
  }
  trap stop_sanitize_build EXIT
fi
bash ci/format_check.sh  # harness/'s C++ as .clang-format says (clang-format --dry-run -Werror)
stamp "format checked"
if [ "${SANITIZE:-1}" != 0 ] && [ $gpu = 0 ]; then
  # No GPU: every gtest runs in the sanitizer build (label sanitize; the gpu ones would only skip here), so the Release
  # build makes just what the other tests run — the ampcheck executable, the Python extension the package test
  # installs, the components benchmark — not the gtest and fuzz binaries (about 200 CPU-seconds of compiling, 100 s
  # of CI on 2 cores); label gtest is left out of it.
  # (+ the Python extension's two test variants, cpu.python_native_safety's: links of the same objects, seconds).
  # A build this command configures is compiled by clang at -O2 (clang is here for the sanitizer build anyway): with
  # the precompiled LibTorch headers a file compiles in about 0.6x GCC -O3's time (sweep_answer.cpp 4.0 s against
  # 6.4 s); GCC builds the main command's and the GPU machine's. An existing build directory is reused as configured.
  # No fused CUDA kernels (AMPCHECK_CUDA_KERNELS=OFF, as in the sanitizer build): without a GPU nothing here runs them
  # — their tests are gtests, run in the sanitizer build, which never compiles them — and where nvcc is installed they
  # were 49 CPU-seconds of this build (layer_norm.cu alone 21 s); ci/gpu.sh compiles and tests them on the GPU machine.
  BUILD_TARGETS="ampcheck ampcheck_native ampcheck_native_private_runtime ampcheck_native_private_runtime_guarded
    ampcheck_bench_components" bash ci/build.sh -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DAMPCHECK_CUDA_KERNELS=OFF
  stamp "Release build done"
  # (the sanitizer build compiles meanwhile in the background: above)
  # label gpu would only skip here (exit 77, about 60 tests at ~0.4 s each): one of them runs, to show the skip
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 -LE '^(sanitize|gtest|extended|gpu)$'
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --no-tests=error -R '^gpu\.scenario\.fp32$'
  stamp "the Release tests done; waiting for the sanitizer build"
  san_rc=0; wait "$san_pid" || san_rc=$?
  stamp "the sanitizer build done"
  trap - EXIT
  cat "$san_log"; rm -f "$san_log" "$san_pidfile"
  [ "$san_rc" = 0 ] || { echo "[test] the sanitizer build failed (exit $san_rc)" >&2; exit 1; }
  bash ci/sanitize.sh --test-only
  stamp "the sanitizer tests done"
elif [ "${SANITIZE:-1}" != 0 ]; then
  bash ci/build.sh
  # every test once: those of the sanitizer slice (label sanitize: the unit tests, a cpu slice) under ASan + UBSan
  # (clang), the others here (GCC, Release) — the slice's Release run would repeat them, uninstrumented
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 -LE '^(sanitize|extended)$'
  bash ci/sanitize.sh
else
  bash ci/build.sh
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 -LE '^extended$'
fi
