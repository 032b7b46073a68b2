#!/usr/bin/env bash
# compare end to end: run A and run B of the same scenarios must compare clean (exit 0); run C, where the
# scenario clip-after-unscale has its unscale_ removed (a planted bug under the same name), must be flagged (exit 1)
# with the changed verdict named. Kept small for CI: 60-step versions of the scenarios against FP32 references
# recorded here for 60 steps (fp16 matmuls are slow on CPUs without native fp16). Then `check --engine fast` on the CPU:
# the fused options run their ATen references, so the scenario passes against the same reference, and the summary
# names the engine path and why CUDA graphs were refused.
set -euo pipefail
ampcheck=$1; src=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
scen="$src/scenarios/clip-after-unscale.yaml $src/scenarios/bf16-autocast.yaml"
opts=(--device cpu --steps 60 --references "$work/refs")
"$ampcheck" record $scen "${opts[@]}" > "$work/record.log"
"$ampcheck" check $scen "${opts[@]}" --out "$work/a" > "$work/a.log" || { cat "$work/a.log"; exit 1; }
"$ampcheck" check $scen "${opts[@]}" --out "$work/b" > "$work/b.log" || { cat "$work/b.log"; exit 1; }
"$ampcheck" compare "$work/a" "$work/b" --max-slowdown 2.0 --max-memory-growth 2.0 > "$work/ab.txt" || { cat "$work/ab.txt"; echo "FAIL: same setup flagged"; exit 1; }
mkdir -p "$work/planted"
sed 's/unscale_first: true/unscale_first: false/' "$src/scenarios/clip-after-unscale.yaml" > "$work/planted/clip-after-unscale.yaml"
grep -q "unscale_first: false" "$work/planted/clip-after-unscale.yaml"
"$ampcheck" check "$work/planted/clip-after-unscale.yaml" "$src/scenarios/bf16-autocast.yaml" "${opts[@]}" \
  --out "$work/c" > "$work/c.log" || true
if "$ampcheck" compare "$work/a" "$work/c" --max-slowdown 2.0 --max-memory-growth 2.0 > "$work/ac.txt"; then
  cat "$work/ac.txt"; echo "FAIL: planted regression not flagged"; exit 1
fi
grep -q "clip-after-unscale .*tracks -> stalls" "$work/ac.txt" || { cat "$work/ac.txt"; echo "FAIL: verdict change not named"; exit 1; }
cat "$work/ab.txt" "$work/ac.txt"
"$ampcheck" check "$src/scenarios/bf16-autocast.yaml" "${opts[@]}" --engine fast --out "$work/d" > "$work/d.log" \
  || { cat "$work/d.log"; echo "FAIL: --engine fast changed the verdict"; exit 1; }
# the engine plan as it ran on the CPU: the restructured ops applied (on their ATen references), the GPU-only options
# refused with their reasons, and no GPU-only option among those applied
line=$(grep "^- bf16-autocast: " "$work/d/summary.md") || { cat "$work/d/summary.md"; echo "FAIL: the engine path is not reported"; exit 1; }
applied=${line%%not applied:*}
for want in "fused head (ATen reference" "fused residual LayerNorm" "fused bias grads + GELU" "fused grad check" \
            "parameter norm from AdamW" "not applied: GEMM epilogues (needs a CUDA device: the run is on cpu)" \
            "cuda graphs (CUDA graphs need a CUDA device"; do
  [[ "$line" == *"$want"* ]] || { echo "$line"; echo "FAIL: the engine path does not say '$want'"; exit 1; }
done
for gpu_only in "GEMM epilogues" "cuda graphs"; do
  [[ "$applied" != *"$gpu_only"* ]] || { echo "$line"; echo "FAIL: '$gpu_only' reported as applied on the CPU"; exit 1; }
done
python3 - "$work/d/summary.json" <<'PY' || { echo "FAIL: summary.json's engine_plan"; exit 1; }
import json, sys
plan = {o["option"]: o for o in json.load(open(sys.argv[1]))["scenarios"][0]["engine_plan"]}
assert not plan["model.gemm_epilogues"]["applied"] and "CUDA device" in plan["model.gemm_epilogues"]["note"], plan
assert not plan["train.cuda_graphs"]["applied"], plan
assert all(plan[k]["applied"] for k in ("model.head_loss", "model.fused_layernorm", "model.fused_bias_gelu",
                                        "train.fused_grad_check", "train.fused_param_norm")), plan
PY
if "$ampcheck" check "$src/scenarios/bf16-autocast.yaml" --engine turbo --out "$work/e" > "$work/e.log" 2>&1; then
  echo "FAIL: --engine turbo accepted"; exit 1
fi
echo "compare: same setup clean, planted regression flagged; --engine fast passes and says what it ran"
