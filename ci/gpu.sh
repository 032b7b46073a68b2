#!/usr/bin/env bash
# The GPU run recipe, for a machine with no network that has what ../shared/GPU.md lists (torch under
# /opt/torch/.venv, HDF5, GoogleTest, Google Benchmark, yaml-cpp, CLI11, nlohmann-json): build, every CTest test
# (gpu label included), the gpu suite, the throughput benchmark against PyTorch-Python and `doctor`.
# Results go to $OUT (default out/gpu): tests.log, suite.log, summary.md + report.html (of the suite's run),
# margins.txt (the margin table of every run of the suite; REPEATS runs, default 3),
# bench.jsonl, bench.md, doctor.txt + doctor.json, run.tar.gz (the whole run directory),
# references.tar.gz (the cuda references recorded here), logs.tar.gz (build log, benchmark stderr).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:$PATH
export AMPCHECK_PYTHON=$(command -v python3)
export BUILD_DIR=${BUILD_DIR:-build-gpu}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export AMPCHECK_GIT_COMMIT=${AMPCHECK_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
STAGES=${STAGES:-build tests record suite repeat bench doctor}
has() { [[ " $STAGES " == *" $1 "* ]]; }

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv; } > "$OUT/doctor.txt" 2>&1
if has build; then
  ( time bash ci/build.sh ) > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
  tail -3 "$OUT/build.log"
fi
if has tests; then
  # the CUDA tests (the gpu label's gtests; the CPU-only tests ran in CI already), verbosely, so the log shows each
  # one ran rather than skipped
  "$BUILD_DIR/harness/tests/ampcheck_tests" --gtest_filter='Cuda*' > "$OUT/tests.log" 2>&1
  echo "ampcheck_tests Cuda* rc=$?"
  "$BUILD_DIR/harness/tests/ampcheck_amp_tests" --gtest_filter='Cuda*' >> "$OUT/tests.log" 2>&1
  echo "ampcheck_amp_tests Cuda* rc=$?"
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\] Cuda" "$OUT/tests.log" | sort | uniq -c | head -20
fi
if has record; then
  # record into a fresh folder, so what comes back is exactly this machine's references
  "$BUILD_DIR/ampcheck" record --suite gpu --device cuda --references "$OUT/references" --force > "$OUT/record.log" 2>&1
  echo "record rc=$?"; tail -4 "$OUT/record.log"
fi
if has suite; then
  refs=references; [ -d "$OUT/references" ] && refs="$OUT/references"
  "$BUILD_DIR/ampcheck" check --suite gpu --device cuda --references "$refs" --out "$OUT/run" > "$OUT/suite.log" 2>&1
  echo "suite rc=$?"; tail -40 "$OUT/suite.log"
  cp "$OUT/run/summary.md" "$OUT/run/report.html" "$OUT/run/summary.json" "$OUT/" 2>/dev/null
  runs=("$OUT/run")
  if has repeat; then  # the suite again, REPEATS-1 times: the same verdicts, and `compare` finds no regression
    for r in $(seq 2 "${REPEATS:-3}"); do
      "$BUILD_DIR/ampcheck" check --suite gpu --device cuda --references "$refs" --out "$OUT/run$r" > "$OUT/suite$r.log" 2>&1
      echo "repeat $r rc=$?"
      runs+=("$OUT/run$r")
    done
    "$BUILD_DIR/ampcheck" compare "$OUT/run" "$OUT/run2" > "$OUT/compare.txt" 2>&1
    echo "repeat: compare rc=$?"; tail -4 "$OUT/compare.txt"
  fi
  # the margin table of every run (docs/TOLERANCE.md), and each run's summary.json
  python3 scenarios/sensitivity/margins.py "${runs[@]}" > "$OUT/margins.txt" 2>&1; echo "margins rc=$?"
  for r in "${runs[@]}"; do cp "$r/summary.json" "$OUT/summary-$(basename "$r").json"; done
  tar czf "$OUT/run.tar.gz" -C "$OUT" $(cd "$OUT" && ls -d run run[0-9]* summary-run*.json suite*.log 2>/dev/null) &&
    rm -rf "$OUT"/run "$OUT"/run[0-9]* "$OUT"/summary-run*.json "$OUT"/suite[0-9]*.log
fi
if has bench; then
  B="$BUILD_DIR/harness/bench/ampcheck_bench_train"
  : > "$OUT/bench.jsonl"
  for s in bf16-autocast fp16-autocast; do
    python3 bench/gpt_baseline.py --preset gpt2-124m --strategy $s --batch 16 --steps 30 >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err"
    for pe in 1 0; do
      "$B" --preset gpt2-124m --strategy $s --batch 16 --steps 30 --probe-every $pe >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err"
    done
  done
  python3 bench/throughput_table.py "$OUT/bench.jsonl" > "$OUT/bench.md"; cat "$OUT/bench.md"; tail -5 "$OUT/bench.err" 2>/dev/null
fi
if has doctor; then
  "$BUILD_DIR/ampcheck" doctor >> "$OUT/doctor.txt" 2>&1; cat "$OUT/doctor.txt"
  "$BUILD_DIR/ampcheck" doctor --json > "$OUT/doctor.json" 2>&1
fi
[ -d "$OUT/references" ] && tar czf "$OUT/references.tar.gz" -C "$OUT" references record.log && rm -rf "$OUT/references" "$OUT/record.log"
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls build.log bench.err 2>/dev/null) && rm -f "$OUT/build.log" "$OUT/bench.err"
