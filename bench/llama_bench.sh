#!/usr/bin/env bash
# The Llama GPU preset's throughput, the engine against PyTorch-Python, in one call on one machine (issue 44): the
# engine stock and with --fast (ampcheck_bench_train --model llama), the plain PyTorch Llama eager and
# torch.compile'd, and transformers' LlamaForCausalLM eager (bench/llama_baseline.py) — same preset, strategy, batch,
# sequence, FLOP convention and timing windows. One JSON line per row on stdout, then a table of them (tokens/s, ms
# per step, TFLOP/s, peak memory, each row's speed over torch.compile's).
#
#   bash bench/llama_bench.sh [BUILD_DIR] [PRESET] [STRATEGY] [BATCH] [SEQ] [DEVICE]
#   bash bench/llama_bench.sh build llama-150m bf16-autocast 8 1024 cuda     (the defaults)
#   bash bench/llama_bench.sh build llama-micro bf16-autocast 2 64 cpu       (a smoke run on the CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build} PRESET=${2:-llama-150m} STRATEGY=${3:-bf16-autocast} BATCH=${4:-8} SEQ=${5:-1024} DEVICE=${6:-cuda}
STEPS=${STEPS:-30} WARMUP=${WARMUP:-5} WINDOW=${WINDOW:-10}
PY=${PYTHON:-python3}
ENGINE="$BUILD/harness/bench/ampcheck_bench_train"
[[ -x "$ENGINE" ]] || { echo "llama_bench.sh: $ENGINE not found. HINT: build first (bash ci/build.sh)" >&2; exit 2; }
common=(--preset "$PRESET" --strategy "$STRATEGY" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --warmup "$WARMUP"
        --window "$WINDOW" --device "$DEVICE")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ENGINE" --model llama "${common[@]}" | tee -a "$out"
"$ENGINE" --model llama "${common[@]}" --fast | tee -a "$out"
"$PY" bench/llama_baseline.py "${common[@]}" | tee -a "$out"
"$PY" bench/llama_baseline.py "${common[@]}" --compile | tee -a "$out"
"$PY" bench/llama_baseline.py "${common[@]}" --hf | tee -a "$out"
"$PY" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
base = next((r for r in rows if r["impl"] == "pytorch-python-compile"), None)
print(f"\n{'impl':<34} {'tokens/s':>12} {'ms/step':>9} {'TFLOP/s':>8} {'peak GiB':>9} {'vs compile':>10}")
for r in rows:
    name = r["impl"] + (" --fast" if r.get("engine", "stock") != "stock" else "")
    rel = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
    print(f"{name:<34} {r['tokens_per_s']:>12.0f} {r['median_step_ms']:>9.2f} {r['tflops']:>8.2f} "
          f"{r['peak_memory_gib']:>9.2f} {rel:>9.3f}x")
PY
