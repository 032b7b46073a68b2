#!/usr/bin/env bash
# The GPU run recipe, for a machine with no network that has (torch under
# /opt/torch/.venv, HDF5, GoogleTest, Google Benchmark, yaml-cpp, CLI11, nlohmann-json): build, every CTest test
# (gpu label included), the gpu suite, the data-parallel runs (NCCL on every GPU), the throughput benchmark against
# PyTorch-Python and `doctor`.
# Results go to $OUT (default out/gpu): tests.log, run<N>.tar.gz (each run of the gpu suite: trajectories,
# summary.json/md, report.html, log), margins.txt (the margin table of every run), compare.txt,
# bench.jsonl, bench.md, doctor.txt + doctor.json, run.tar.gz (the whole run directory),
# references.tar.gz (the cuda references recorded here), logs.tar.gz (build log, benchmark stderr).
# Fails closed: the first stage that fails stops the script with a non-zero exit and a line naming the stage and what
# failed (after that stage's results are packed into $OUT, so what ran still comes back).
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=setup
die() { echo "ci/gpu.sh: stage '$STAGE' failed: $*" >&2; exit 1; }
# ok RC WHAT: an exit status checked once the command's output is saved; anything but 0 stops the script
ok() { [ "$1" -eq 0 ] || die "$2 (exit $1)"; }
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:$PATH
export AMPCHECK_PYTHON=$(command -v python3)
export BUILD_DIR=${BUILD_DIR:-build-gpu}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
# NVLink multicast stays off (a rule of the lent GPU machines); the ranks ampcheck starts inherit it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export AMPCHECK_GIT_COMMIT=${AMPCHECK_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
STAGES=${STAGES:-build tests record suite fastsuite dist multigpu fp8 validate bench profile components doctor}
KNOWN="build tests record suite fastsuite dist multigpu fp8 validate bench profile components doctor sweep llama llamavalidate llamabench overhead guard nonfinite loadcampaign"
for s in $STAGES; do [[ " $KNOWN " == *" $s "* ]] || die "unknown stage '$s' (known: $KNOWN)"; done
has() { [[ " $STAGES " == *" $1 "* ]] && STAGE=$1; }

{ nvidia-smi -L && nvidia-smi --query-gpu=driver_version,memory.total --format=csv; } > "$OUT/doctor.txt" 2>&1 ||
  { cat "$OUT/doctor.txt"; die "nvidia-smi: no GPU visible"; }
if has build; then
  ( time bash ci/build.sh ) > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; die "ci/build.sh (log: $OUT/build.log)"; }
  tail -3 "$OUT/build.log"
fi
if has tests; then
  # the CUDA tests (the gpu label's gtests; the CPU-only tests ran in CI already), verbosely, so the log shows each
  # one ran rather than skipped
  "$BUILD_DIR/harness/tests/ampcheck_tests" --gtest_filter='Cuda*' > "$OUT/tests.log" 2>&1; rc1=$?
  echo "ampcheck_tests Cuda* rc=$rc1"
  "$BUILD_DIR/harness/tests/ampcheck_amp_tests" --gtest_filter='Cuda*' >> "$OUT/tests.log" 2>&1; rc2=$?
  echo "ampcheck_amp_tests Cuda* rc=$rc2"
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\] Cuda" "$OUT/tests.log" | awk '{print $1, $2, $3}' | sort | uniq -c | head -20
  ok $rc1 "ampcheck_tests --gtest_filter=Cuda*"; ok $rc2 "ampcheck_amp_tests --gtest_filter=Cuda*"
fi
WORK=${WORK:-/tmp/ampcheck-gpu}; mkdir -p "$WORK"
if has sweep; then
  # issue 41: `ampcheck sweep` of a user's plain PyTorch loop (examples/sweep/plain_loop.py) on CUDA: (1) a tiny Llama,
  # every strategy the device offers (FP8 through torchao when importable: the device image has none, so a call may
  # carry one unpacked under .gpu-site/, which goes on PYTHONPATH; fp16 with fp32 masters is refused where the
  # framework keeps none); (2) the same Llama with a planted overflow (model.layers.1.mlp.up_proj's weights x 1e6, in
  # the FP32 runs too): fp16 fails; its verdict names the first non-finite module, and --localize names the modules
  # to keep in FP32 or says why it cannot (reports/examples/gpu-h100-sweep-localize/). Tables and sweep.json back in
  # $OUT/sweep-*/. SWEEP_STRATEGIES: the localized sweep's strategies (default fp16-autocast-scaler,bf16-autocast).
  [ -d .gpu-site ] && export PYTHONPATH="$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1
  sweep_rc=0
  # SWEEPS (default "llama llama-localize"): which of the two run
  for what in "llama|" "llama-localize|--localize --strategies ${SWEEP_STRATEGIES:-fp16-autocast-scaler,bf16-autocast}"; do
    [[ " ${SWEEPS:-llama llama-localize} " == *" ${what%%|*} "* ]] || continue
    name=sweep-${what%%|*}; extra=${what#*|}; plant=()
    [ "$name" = sweep-llama-localize ] && plant=(--plant-overflow model.layers.1.mlp.up_proj)
    rm -rf "$WORK/$name"
    # shellcheck disable=SC2086  # $extra is a list of options
    # SWEEP_EXTRA: more sweep options (e.g. --timing-rounds 1 where device time is short)
    ( time "$BUILD_DIR/ampcheck" sweep --steps ${SWEEP_STEPS:-200} --out "$WORK/$name" --timeout 600 $extra ${SWEEP_EXTRA:-} -- \
        python3 examples/sweep/plain_loop.py --model llama --steps 100000 "${plant[@]}" ) > "$OUT/$name.log" 2>&1 \
      || { rc=$?; [ $rc = 1 ] || sweep_rc=$rc; }  # exit 1: a strategy's row FAILs (a finding, not a broken stage)
    echo "$name rc=$sweep_rc"; tail -24 "$OUT/$name.log"
    mkdir -p "$OUT/$name"
    cp "$WORK/$name"/{summary.json,summary.md,sweep.json,report.html} "$OUT/$name/" 2>/dev/null || true
    cp -r "$WORK/$name/logs" "$OUT/$name/" 2>/dev/null || true  # each run's and probe's log (the probes' verdicts)
  done
  ok $sweep_rc "ampcheck sweep (tiny Llama, CUDA)"
fi
if has llama; then
  # issue 44: the Llama GPU scenarios (scenarios/llama/gpu/, llama-150m): their FP32 references recorded here into a
  # fresh folder ($OUT/llama-references.tar.gz: to commit under references/cuda-sm90), then every scenario checked
  # against them — each pitfall's verdict and margin beside its twin's ($OUT/llama/summary.md)
  rm -rf "$WORK/llama-references" "$WORK/llama"
  ( time "$BUILD_DIR/ampcheck" record scenarios/llama/gpu/*.yaml --device cuda --references "$WORK/llama-references" ) \
    > "$WORK/llama-record.log" 2>&1; rc=$?
  echo "llama record rc=$rc"; tail -4 "$WORK/llama-record.log"
  tar czf "$OUT/llama-references.tar.gz" -C "$WORK" llama-references llama-record.log
  ok $rc "ampcheck record scenarios/llama/gpu"
  ( time "$BUILD_DIR/ampcheck" check scenarios/llama/gpu/*.yaml --device cuda --jobs 1 --references "$WORK/llama-references" \
    --out "$WORK/llama" --force ) > "$WORK/llama.log" 2>&1; rc=$?
  echo "llama check rc=$rc"; tail -20 "$WORK/llama.log"
  mkdir -p "$OUT/llama"; cp "$WORK/llama.log" "$WORK/llama"/summary.{json,md} "$WORK/llama"/report.html "$OUT/llama/" 2>/dev/null
  ok $rc "ampcheck check scenarios/llama/gpu"
fi
if has llamavalidate; then
  # issue 44: the validate suite's Llama scenario on this GPU: its FP32 reference and golden recorded here
  # ($OUT/llama-validate.tar.gz: to commit), then validated against them on the same machine (bit for bit)
  V=$WORK/llama-validate; rm -rf "$V"; mkdir -p "$V/refs"; sc=scenarios/validate/bf16-autocast-llama.yaml
  { "$BUILD_DIR/ampcheck" record $sc --device cuda --references "$V/refs" &&
    "$BUILD_DIR/ampcheck" validate --record $sc --references "$V/refs" &&
    "$BUILD_DIR/ampcheck" validate $sc --references "$V/refs" --out "$V/same"; } > "$V/validate.log" 2>&1; rc=$?
  grep -E "^VALIDATE|rc=" "$V/validate.log" | tail -6
  tar czf "$OUT/llama-validate.tar.gz" -C "$WORK" llama-validate || die "tar llama-validate"
  ok $rc "record + validate scenarios/validate/bf16-autocast-llama.yaml"
fi
if has llamabench; then
  # issue 44: the engine on llama-150m against PyTorch-Python eager, torch.compile and transformers, one call
  for s in ${LLAMA_BENCH_STRATEGIES:-bf16-autocast}; do
    bash bench/llama_bench.sh "$BUILD_DIR" llama-150m "$s" 8 1024 cuda > "$OUT/llama-bench-$s.txt" 2>"$OUT/llama-bench-$s.err"; rc=$?
    echo "llama bench $s rc=$rc"; tail -8 "$OUT/llama-bench-$s.txt"; tail -3 "$OUT/llama-bench-$s.err"
    ok $rc "bench/llama_bench.sh $s"
  done
fi
if has guard; then
  # issue 51: the live guard on this GPU. First what the native core's link holds (a private libstdc++ inside the
  # module crashed the training process here: python/tests/test_private_runtime.py), then the in-process judge in fresh
  # processes (python/tools/guard_crash_probe.py), the guard's cost case (nanoGPT-style loop, GPT-2 124M, fp16 +
  # GradScaler, judge_every=50, background) and the HF Trainer's planted fp16 blow-up stopped by the guard, on CUDA.
  so=$(ls "$BUILD_DIR"/python/ampcheck/_native*.so)
  { env | grep -E "^(LD|CXX|C|CPP)FLAGS=" || echo "no LDFLAGS / CXXFLAGS / CFLAGS in the environment"
    grep -E "^CMAKE_(SHARED|MODULE|EXE)_LINKER_FLAGS:" "$BUILD_DIR/CMakeCache.txt"
    ( cd "$BUILD_DIR" && ninja -t commands ampcheck_native | tail -1 | tr ' ' '\n' | grep -E "static|stdc\+\+|\.a$" | sort -u )
    echo "libstdc++ symbols defined in $so (none expected):"
    nm -D --defined-only "$so" | grep -E "_ZNSt6locale7classicEv|_ZNSo9_M_insertIdEERSoT_|_ZNSt8ios_base4InitC1Ev" || echo "  none"
    python3 -c "import sys; sys.path.insert(0, 'python/src'); import ampcheck; print('native_available', ampcheck.native_available())"
  } > "$OUT/guard-link.txt" 2>&1; cat "$OUT/guard-link.txt"
  timeout 300 python3 python/tools/guard_crash_probe.py --device cuda --size small --steps 60 --out "$WORK/guard-probe" \
    --ampcheck "$BUILD_DIR/ampcheck" 2>&1 | grep -v Warning > "$OUT/guard-probe.txt"; cat "$OUT/guard-probe.txt"
  grep -q "rc=-" "$OUT/guard-probe.txt" && die "the in-process judge died by a signal (guard-probe.txt)"
  AMPCHECK_BIN="$BUILD_DIR/ampcheck" python3 python/tools/overhead.py --device cuda --loops nanogpt --sizes gpt2 \
    --dtype fp16 --cases none default guard > "$OUT/guard-overhead.md" 2>"$OUT/guard-overhead.err"; rc=$?
  echo "guard overhead rc=$rc"; cat "$OUT/guard-overhead.md"; grep "guard:" "$OUT/guard-overhead.err" | tail -3
  tail -3 "$OUT/guard-overhead.err"; ok $rc "python/tools/overhead.py --cases guard (cuda)"
  AMPCHECK_BIN="$BUILD_DIR/ampcheck" python3 python/tools/guard_check.py --parts stop --device cuda \
    > "$OUT/guard-stop.md" 2>"$OUT/guard-stop.err"; rc=$?
  echo "guard stop rc=$rc"; cat "$OUT/guard-stop.md"; tail -3 "$OUT/guard-stop.err"
  ok $rc "python/tools/guard_check.py --parts stop --device cuda"
fi
if has nonfinite; then
  # issue 52: the first non-finite operation on CUDA (python/tools/nonfinite_check.py): a forward overflow, the backward
  # of scaled_dot_product_attention replayed per backend (math, flash, efficient, cuDNN), a transformers Llama, and
  # what tracking costs a healthy transformers GPT-2 (interleaved pairs)
  timeout 400 python3 python/tools/nonfinite_check.py --device cuda --out "$OUT" --parts "${NONFINITE_PARTS:-cases,cost}" > "$OUT/nonfinite.log" 2>&1; rc=$?
  echo "nonfinite rc=$rc"; cat "$OUT/nonfinite.md" 2>/dev/null || tail -20 "$OUT/nonfinite.log"
  ok $rc "python/tools/nonfinite_check.py --device cuda"
fi
if has loadcampaign; then
  # issue 52: the sweep's speed rankings with and without a GPU load (another process's FP32 matmuls) and a CPU load
  # (a busy loop per core) — bench/sweep_load_campaign.py on CUDA; LOAD_WORKLOADS, LOAD_LOADS, LOAD_STRATEGIES
  timeout "${LOAD_TIMEOUT:-560}" python3 bench/sweep_load_campaign.py --ampcheck "$BUILD_DIR/ampcheck" --out "$WORK/load" --device cuda \
    --workloads "${LOAD_WORKLOADS:-gpu-wide,gpu-tiny}" --loads "${LOAD_LOADS:-gpu,cpu}" \
    --strategies "${LOAD_STRATEGIES:-bf16-autocast,fp16-autocast-scaler}" > "$OUT/loadcampaign.md" 2>&1; rc=$?
  echo "loadcampaign rc=$rc"; cat "$OUT/loadcampaign.md"
  mkdir -p "$OUT/load"; cp "$WORK/load/results.jsonl" "$OUT/load/" 2>/dev/null
  for d in "$WORK"/load/*/; do [ -f "$d/sweep.json" ] && mkdir -p "$OUT/load/$(basename "$d")" &&
    cp "$d/sweep.json" "$OUT/load/$(basename "$d")/"; done
  ok $rc "bench/sweep_load_campaign.py --device cuda"
fi
if has overhead; then
  # issue 42: the recorder's cost per step on this GPU (python/tools/overhead.py: the loop without the recorder in the
  # same process, interleaved), a nanoGPT-style plain loop and the HF Trainer, two sizes
  python3 python/tools/overhead.py --device cuda --loops ${OVERHEAD_LOOPS:-nanogpt hf} --sizes small gpt2 --dtype fp16 \
    > "$OUT/overhead-gpu.md" 2>"$OUT/overhead-gpu.err"; rc=$?
  echo "overhead rc=$rc"; cat "$OUT/overhead-gpu.md"; tail -5 "$OUT/overhead-gpu.err"
  ok $rc "python/tools/overhead.py --device cuda"
fi
if has record; then
  # record into a fresh folder, so what comes back ($OUT/references.tar.gz, right away) is exactly this machine's
  # references; RECORD_SCENARIOS (files) limits it to some scenarios' references
  what=(--suite gpu); [ -n "${RECORD_SCENARIOS:-}" ] && what=($RECORD_SCENARIOS)
  rm -rf "$WORK/references"
  ( time "$BUILD_DIR/ampcheck" record "${what[@]}" --device cuda --references "$WORK/references" --force ) > "$WORK/record.log" 2>&1; rc=$?
  echo "record rc=$rc"; tail -8 "$WORK/record.log"
  tar czf "$OUT/references.tar.gz" -C "$WORK" references record.log
  ok $rc "ampcheck record"
fi
if has dist; then
  # the data-parallel path on CUDA: NCCL at world size 1 (the dist-gpu suite), against FP32 references recorded here
  grep -E "ampcheck: (c10d|NCCL|no gloo)" "$OUT/build.log" 2>/dev/null || true
  rm -rf "$WORK/dist-references" "$WORK/dist"
  "$BUILD_DIR/ampcheck" record --suite dist-gpu --device cuda --references "$WORK/dist-references" > "$WORK/dist-record.log" 2>&1; rc_rec=$?
  echo "dist record rc=$rc_rec"; tail -3 "$WORK/dist-record.log"
  "$BUILD_DIR/ampcheck" check --suite dist-gpu --device cuda --jobs 1 --references "$WORK/dist-references" \
    --out "$WORK/dist" --force > "$WORK/dist.log" 2>&1; rc=$?
  echo "dist check rc=$rc"; tail -12 "$WORK/dist.log"
  cp "$WORK/dist.log" "$WORK/dist-record.log" "$WORK/dist/" 2>/dev/null
  cp -r "$WORK/dist-references" "$WORK/dist/references" 2>/dev/null
  tar czf "$OUT/dist.tar.gz" -C "$WORK" dist
  ok $rc_rec "ampcheck record --suite dist-gpu"; ok $rc "ampcheck check --suite dist-gpu"
fi
if has multigpu; then
  # data parallel over this machine's GPUs (NCCL): the dist-multigpu suite's scenarios with at most as many ranks as
  # GPUs (the others are skipped by ampcheck, exit 77), against the committed single-GPU FP32 reference; then
  # bench/dist_scaling.py at world size 1, 2, 4, 8 up to the GPU count (GPT-2 124M bf16, 8 x 1024 tokens a rank).
  # $OUT/multigpu.tar.gz: the run directory (summary.md, report.html, rank files and logs), scaling.md/jsonl.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  echo "multigpu: $gpus GPUs"
  rm -rf "$WORK/multigpu"; mkdir -p "$WORK/multigpu"
  files=()
  for f in $(grep -E "^  - " scenarios/suites/dist-multigpu.yaml | sed 's/^  - //'); do
    w=$(grep -oE "world_size: [0-9]+" "scenarios/$f" | grep -oE "[0-9]+")
    [ "$w" -le "$gpus" ] && files+=("scenarios/$f")
  done
  if [ ${#files[@]} -gt 0 ]; then
    ( time "$BUILD_DIR/ampcheck" check "${files[@]}" --device cuda --jobs 1 --out "$WORK/multigpu/run" --force ) \
      > "$WORK/multigpu/suite.log" 2>&1; rc=$?
    echo "multigpu suite rc=$rc"; tail -16 "$WORK/multigpu/suite.log"
  else  # fewer than 2 GPUs: what ampcheck says for a 2-GPU scenario
    "$BUILD_DIR/ampcheck" check scenarios/dist-multigpu/dist-gpt2-bf16-2gpus.yaml --device cuda --out "$WORK/multigpu/run" \
      > "$WORK/multigpu/suite.log" 2>&1; rc=$?
    echo "multigpu suite on $gpus GPU(s) rc=$rc (77: skipped)"; cat "$WORK/multigpu/suite.log"
    [ $rc -eq 77 ] && rc=0
  fi
  worlds=1; for w in 2 4 8; do [ $w -le "$gpus" ] && worlds="$worlds,$w"; done
  python3 bench/dist_scaling.py --ampcheck "$BUILD_DIR/ampcheck" --out "$WORK/multigpu/scaling" --force \
    --preset gpt2-124m --strategy bf16-autocast --per-rank-batch 8 --seq-len 1024 --world-sizes "$worlds" \
    --backend nccl --device cuda --steps ${SCALING_STEPS:-30} > "$WORK/multigpu/scaling.log" 2>&1; rc_sc=$?
  echo "scaling rc=$rc_sc"; tail -8 "$WORK/multigpu/scaling.log"
  cp "$WORK/multigpu/scaling/scaling.md" "$WORK/multigpu/scaling/scaling.jsonl" "$OUT/" 2>/dev/null
  tar czf "$OUT/multigpu.tar.gz" -C "$WORK" multigpu
  ok $rc "ampcheck check (dist-multigpu)"; ok $rc_sc "bench/dist_scaling.py"
fi
if has fp8; then
  # the fp8 suite (FP8 recipes and planted failures, GPT-2 124M and mini): the GPT-2 scenarios share the committed
  # references/cuda-sm90 FP32 reference of the gpu suite's workload; the mini one is recorded here into a copy, so what
  # comes back ($OUT/fp8.tar.gz) holds exactly the new reference beside the run directory
  rm -rf "$WORK/fp8-references" "$WORK/fp8"
  cp -r references "$WORK/fp8-references"
  if [ -n "${FP8_RECORD:-}" ] || ! ls references/cuda-sm90/gpt-mini-*.h5 > /dev/null 2>&1; then
    rm -f "$WORK"/fp8-references/cuda-sm90/gpt-mini-*.h5
    ( time "$BUILD_DIR/ampcheck" record scenarios/fp8/mini/fp8-mini.yaml --device cuda --references "$WORK/fp8-references" ) \
      > "$WORK/fp8-record.log" 2>&1; rc=$?
    echo "fp8 record rc=$rc"; tail -3 "$WORK/fp8-record.log"
    ok $rc "ampcheck record scenarios/fp8/mini/fp8-mini.yaml"
  fi
  ( time "$BUILD_DIR/ampcheck" check --suite fp8 --device cuda --jobs 1 --references "$WORK/fp8-references" \
    --out "$WORK/fp8" --force ) > "$WORK/fp8.log" 2>&1; rc=$?
  echo "fp8 check rc=$rc"; tail -26 "$WORK/fp8.log"
  mkdir -p "$WORK/fp8/references"
  cp "$WORK/fp8.log" "$WORK/fp8-record.log" "$WORK/fp8/" 2>/dev/null
  find "$WORK/fp8-references" -name 'gpt-mini-*.h5' -exec cp {} "$WORK/fp8/references/" \;
  tar czf "$OUT/fp8.tar.gz" -C "$WORK" fp8
  ok $rc "ampcheck check --suite fp8"
fi
if has suite; then
  # RUNS (default "1 2 3"): the suite checked once per entry, into $WORK/run<N>; each run leaves $OUT/run<N>.tar.gz
  # (trajectories, summary.json/md, report.html, the log) as soon as it ends, so a call cut short keeps what ran.
  # Then the margin table of every run there (docs/TOLERANCE.md) and `compare` of the first two.
  refs=${REFERENCES:-references}; [ -d "$WORK/references" ] && refs="$WORK/references"
  for r in ${RUNS:-1 2 3}; do
    "$BUILD_DIR/ampcheck" check --suite gpu --device cuda --jobs "${CHECK_JOBS:-1}" --references "$refs" \
      --out "$WORK/run$r" --force > "$WORK/suite$r.log" 2>&1; rc=$?
    echo "suite run $r rc=$rc"; tail -32 "$WORK/suite$r.log"
    cp "$WORK/suite$r.log" "$WORK/run$r/suite.log"
    tar czf "$OUT/run$r.tar.gz" -C "$WORK" "run$r"
    ok $rc "ampcheck check --suite gpu (run $r)"
  done
  runs=$(cd "$WORK" && ls -d run[0-9]* | sed "s|^|$WORK/|")
  python3 scenarios/sensitivity/margins.py $runs > "$OUT/margins.txt" 2>&1; rc=$?
  # exit 3: some scenario below its calibration target — a finding the table states, not a failed stage
  echo "margins rc=$rc"; tail -3 "$OUT/margins.txt"; [ $rc -eq 3 ] || ok $rc "scenarios/sensitivity/margins.py"
  set -- $runs
  if [ $# -ge 2 ]; then
    "$BUILD_DIR/ampcheck" compare "$1" "$2" > "$OUT/compare.txt" 2>&1; rc=$?
    echo "compare rc=$rc"; tail -4 "$OUT/compare.txt"; ok $rc "ampcheck compare"
  fi
fi
if has bench; then
  # the engine (stock; CUDA graphs; + the fused LM head; + fused LayerNorm; + fused bias grads / GELU; + GEMM epilogues
  # = --fast) against PyTorch-Python eager and torch.compile, in one
  # call: bf16, fp16 + GradScaler (fused AdamW), fp8; probes never and every 10 steps. BENCH_QUICK=1: bf16 engine only.
  B="$BUILD_DIR/harness/bench/ampcheck_bench_train"
  # BENCH_WARMUP_SECONDS: every run (engine and Python) trains that long past its 21 warm-up steps before the timed
  # windows (the GPU's clocks and temperature under load); BENCH_STEPS: the timed steps (windows of 10)
  WS=${BENCH_WARMUP_SECONDS:-0} NS=${BENCH_STEPS:-30}
  run_b() { "$B" --preset gpt2-124m --batch 16 --steps $NS --warmup 21 --warmup-seconds $WS "$@" >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" ||
    { tail -5 "$OUT/bench.err"; kill $SMI_PID 2>/dev/null; die "ampcheck_bench_train $*"; }; }
  run_py() { python3 bench/gpt_baseline.py --preset gpt2-124m --batch 16 --steps $NS --warmup 21 --warmup-seconds $WS "$@" >> "$OUT/bench.jsonl" 2>>"$OUT/bench.err" ||
    { tail -5 "$OUT/bench.err"; kill $SMI_PID 2>/dev/null; die "bench/gpt_baseline.py $*"; }; }
  : > "$OUT/bench.jsonl"
  # the GPU's clocks, temperature and power every 250 ms while the benchmark runs (read only)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active \
    --format=csv -lms 250 > "$OUT/bench-clocks.csv" 2>/dev/null & SMI_PID=$!
  if [ -n "${BENCH_RATIO:-}" ]; then
    # BENCH_RATIO=1: the ratio the engine issue asks for and nothing else — per strategy the Python baselines, the
    # engine stock and --fast; BENCH_ROUNDS=N (default 1): torch.compile and --fast N - 1 times more, each round's
    # engine row set against its own torch.compile (bench/throughput_table.py pairs a row with the baseline before it);
    # BENCH_ALSO="flags[;flags...]": more engine rows after each --fast (e.g. --fast less its newest option: what that
    # bought), one per ';'-separated set of flags
    also_rows() {
      local sets flags f; IFS=';' read -r -a sets <<< "${BENCH_ALSO:-}"
      for flags in "${sets[@]}"; do IFS=' ' read -r -a f <<< "$flags"; run_b --strategy "$1" --probe-every 0 "${f[@]}"; done
    }
    for s in bf16-autocast fp16-autocast; do
      run_py --strategy $s
      run_py --strategy $s --compile
      run_b --strategy $s --probe-every 0
      run_b --strategy $s --probe-every 0 --fast
      also_rows $s
      for _ in $(seq 2 "${BENCH_ROUNDS:-1}"); do
        run_py --strategy $s --compile
        run_b --strategy $s --probe-every 0 --fast
        also_rows $s
      done
    done
  elif [ -n "${BENCH_QUICK:-}" ]; then
    for e in "" "--cuda-graphs" "--cuda-graphs --head-loss fused" "--cuda-graphs --head-loss fused --fused-layernorm" \
      "--cuda-graphs --head-loss fused --fused-layernorm --fused-bias-gelu" "--fast"; do
      run_b --strategy bf16-autocast --probe-every 0 $e
    done
    run_b --strategy fp16-autocast --probe-every 0 --fast; run_b --strategy bf16-autocast --probe-every 10 --fast
  else
    for s in bf16-autocast fp16-autocast; do
      # the engine's warm-up (21 steps) for the baselines too; before 2026-12-03's last commits they had 5
      run_py --strategy $s
      run_py --strategy $s --compile
    done
    for s in bf16-autocast fp16-autocast fp8; do
      for pe in 0 10; do
        run_b --strategy $s --probe-every $pe
        [ "$s" != fp8 ] && [ $pe = 0 ] && run_b --strategy $s --probe-every $pe --cuda-graphs
        [ "$s" != fp8 ] && [ $pe = 0 ] && run_b --strategy $s --probe-every $pe --cuda-graphs --head-loss fused
        [ "$s" != fp8 ] && [ $pe = 0 ] && run_b --strategy $s --probe-every $pe --cuda-graphs --head-loss fused --fused-layernorm
        [ "$s" != fp8 ] && [ $pe = 0 ] && run_b --strategy $s --probe-every $pe --cuda-graphs --head-loss fused --fused-layernorm --fused-bias-gelu
        run_b --strategy $s --probe-every $pe --fast
      done
    done
  fi
  kill $SMI_PID 2>/dev/null
  python3 bench/throughput_table.py "$OUT/bench.jsonl" --clocks "$OUT/bench-clocks.csv" > "$OUT/bench.md" ||
    die "bench/throughput_table.py"
  cat "$OUT/bench.md"
  tail -5 "$OUT/bench.err" 2>/dev/null
  if [ -z "${BENCH_QUICK:-}${BENCH_RATIO:-}" ]; then
    "$B" --fp8-breakdown --batch 16 --seq 1024 > "$OUT/fp8_breakdown.json" 2>>"$OUT/bench.err" || die "--fp8-breakdown"
  fi
fi
if has fastsuite; then
  # the gpu suite on the engine's fastest path (check --engine fast: CUDA graphs and the fused LM head wherever they
  # apply), against the committed references: the fused path must give the verdicts the stock path gives
  "$BUILD_DIR/ampcheck" check --suite gpu --device cuda --jobs 1 --engine fast --out "$WORK/fast" --force > "$WORK/fast.log" 2>&1; rc=$?
  echo "fast suite rc=$rc"; tail -40 "$WORK/fast.log"
  cp "$WORK/fast.log" "$WORK/fast/suite.log"; tar czf "$OUT/fast.tar.gz" -C "$WORK" fast
  ok $rc "ampcheck check --suite gpu --engine fast"
fi
if has profile; then
  # where one GPT-2 step's GPU time goes (batch 16 x 1024), by kernel category (bench/kernel_categories.json): the
  # engine (bf16, fp16 + GradScaler, fp8; probes off) against the PyTorch-Python baseline eager and torch.compile
  B="$BUILD_DIR/harness/bench/ampcheck_bench_train"
  : > "$OUT/profile.jsonl"
  # PROFILE_QUICK=1: bf16 and fp16 only
  for s in bf16-autocast fp16-autocast fp8; do
    [ -n "${PROFILE_QUICK:-}" ] && [ $s = fp8 ] && continue
    "$B" --preset gpt2-124m --strategy $s --batch 16 --warmup 8 --probe-every 0 --profile 5 >> "$OUT/profile.jsonl" 2>>"$OUT/profile.err" || die "profile $s"
    "$B" --preset gpt2-124m --strategy $s --batch 16 --warmup 8 --probe-every 0 --profile 5 --fast \
      >> "$OUT/profile.jsonl" 2>>"$OUT/profile.err" || die "profile $s --fast"
  done
  for s in bf16-autocast fp16-autocast; do
    [ -n "${PROFILE_QUICK:-}" ] && continue  # PROFILE_QUICK=1: the engine only
    python3 bench/profile_step.py --strategy $s --batch 16 >> "$OUT/profile.jsonl" 2>>"$OUT/profile.err" || die "profile_step.py $s"
    python3 bench/profile_step.py --strategy $s --batch 16 --compile >> "$OUT/profile.jsonl" 2>>"$OUT/profile.err" ||
      die "profile_step.py $s --compile"
  done
  python3 bench/breakdown_table.py "$OUT/profile.jsonl" > "$OUT/profile.md" || die "bench/breakdown_table.py"
  cat "$OUT/profile.md"
  grep -v "^\[W\|^W1\|DeviceProperties" "$OUT/profile.err" | tail -5
fi
if has components; then
  # the harness's own machinery per GPT-2 step (Google Benchmark): GradScaler paths, probes, trajectory write, verdict;
  # and PyTorch-Python's GradScaler on the same model's grads
  "$BUILD_DIR/harness/bench/ampcheck_bench_components" --benchmark_min_time=0.5 > "$OUT/components.txt" 2>>"$OUT/profile.err"; rc=$?
  echo "components rc=$rc"; tail -16 "$OUT/components.txt"; ok $rc "ampcheck_bench_components"
  python3 bench/gradscaler_python.py --preset gpt2-124m >> "$OUT/components.txt" 2>>"$OUT/profile.err" ||
    die "bench/gradscaler_python.py"
  tail -1 "$OUT/components.txt"
fi
if has validate; then
  # `ampcheck validate` on this GPU (docs/VALIDATE.md): the validate and validate-8gb suites' FP32 references and
  # goldens recorded here (validate.tar.gz: to commit), then validated on the same machine (bit for bit); a planted
  # bit flip, persistent and transient; the committed CPU goldens and references as the nearest class (statistical,
  # the cross-class margins); the detection table of planted faults (detection-gpu.md).
  V=$WORK/validate; rm -rf "$V"; mkdir -p "$V/refs"
  A="$BUILD_DIR/ampcheck"
  { "$A" record --suite validate --device cuda --references "$V/refs" &&
    "$A" record --suite validate-8gb --device cuda --references "$V/refs" &&
    "$A" validate --record --suite validate --references "$V/refs" &&
    "$A" validate --record --suite validate-8gb --references "$V/refs" &&
    "$A" validate --suite validate --references "$V/refs" --out "$V/same" &&
    "$A" validate --suite validate-8gb --references "$V/refs" --out "$V/same-8gb"; } > "$V/validate.log" 2>&1; rc=$?
  grep -E "^VALIDATE|passed|failed|rc=" "$V/validate.log" | tail -12
  if [ $rc -eq 0 ]; then
    sc=scenarios/validate/fp32-gpt.yaml
    "$A" validate $sc --references "$V/refs" --out "$V/persistent" --plant 'bitflip:param:h.0.mlp.c_fc.weight:0:30@10' > "$V/persistent.log" 2>&1; p=$?
    "$A" validate $sc --references "$V/refs" --out "$V/transient" --plant 'bitflip:param:h.0.mlp.c_fc.weight:0:30@10:transient' > "$V/transient.log" 2>&1; t=$?
    grep -h "^VALIDATE" "$V/persistent.log" "$V/transient.log"
    mkdir -p "$V/cpu-only" && cp -r references/cpu references/validate "$V/cpu-only/"
    "$A" validate --suite validate --references "$V/cpu-only" --out "$V/cross" > "$V/cross.log" 2>&1; x=$?
    grep "^VALIDATE" "$V/cross.log"; echo "cross-class (GPU against the CPU goldens and references) rc=$x"
    # the committed goldens (sealed: checksum, config hash, steps) on this GPU, and numerics settings named as drift,
    # never as a fault of the machine (issue 39)
    "$A" validate --suite validate --out "$V/committed" > "$V/committed.log" 2>&1; cm=$?
    grep "^VALIDATE" "$V/committed.log"; echo "the committed goldens rc=$cm"
    for e in NVIDIA_TF32_OVERRIDE=0 CUBLAS_WORKSPACE_CONFIG=:16:8 NCCL_ALGO=Ring; do
      env "$e" "$A" validate $sc --references "$V/refs" --out "$V/drift-${e%%=*}" > "$V/drift-${e%%=*}.log" 2>&1; dr=$?
      grep "^VALIDATE" "$V/drift-${e%%=*}.log"; echo "drift $e rc=$dr"
      grep -q "env ${e%%=*}" "$V/drift-${e%%=*}.log" || { echo "drift $e: the setting is not named"; cm=1; }
      if grep "^VALIDATE" "$V/drift-${e%%=*}.log" | grep -qE "persistent|transient"; then echo "drift $e blamed on the machine"; cm=1; fi
    done
    python3 scenarios/validate/detection.py --ampcheck "$A" --references "$V/refs" --bits 30,23,22,10,0 \
      --out "$OUT/detection-gpu.md" --force > "$V/detection.log" 2>&1; d=$?
    head -8 "$OUT/detection-gpu.md" 2>/dev/null
  fi
  tar czf "$OUT/validate.tar.gz" -C "$V" . || die "tar validate"
  ok $rc "record + validate the validate suites"
  [ $p -eq 1 ] || die "a persistent bit flip was not caught (exit $p)"
  [ $t -eq 1 ] || die "a transient bit flip was not caught (exit $t)"
  ok $d "scenarios/validate/detection.py"
  ok $cm "validate against the committed goldens, numerics settings as drift"
fi
if has doctor; then
  "$BUILD_DIR/ampcheck" doctor >> "$OUT/doctor.txt" 2>&1; rc=$?; cat "$OUT/doctor.txt"; ok $rc "ampcheck doctor"
  "$BUILD_DIR/ampcheck" doctor --json > "$OUT/doctor.json" 2>&1 || die "ampcheck doctor --json"
fi
STAGE=pack
logs=$(cd "$OUT" && ls build.log bench.err profile.err 2>/dev/null)
if [ -n "$logs" ]; then
  tar czf "$OUT/logs.tar.gz" -C "$OUT" $logs || die "tar logs"
  rm -f "$OUT/build.log" "$OUT/bench.err" "$OUT/profile.err"
fi
echo "ci/gpu.sh: every stage passed ($STAGES)"
