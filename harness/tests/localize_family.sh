#!/usr/bin/env bash
# Issue 52: `ampcheck sweep --localize` names a single-module cause in a model family no other test uses — a tiny
# Qwen2 (transformers, built from its config), plain PyTorch loop (AdamW, the Recorder), one attention projection's
# weights x 1e6 in every run (scenarios/localize/plant_train.py), fp16 autocast + GradScaler. Before issue 52 the
# keep-every-leaf probe skipped its GradScaler warm-up, was judged `diverges`, and the search stopped there
# ("the cause is not in one module's compute"); now the first non-finite module is the first hypothesis: named exactly.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
planted=model.layers.1.self_attn.o_proj
cd "$work"
"$ampcheck" sweep --steps 20 --localize --strategies fp16-autocast-scaler --out "$work/s" -- \
  "$python" "$src/scenarios/localize/plant_train.py" --family qwen2 --steps 20 --factor 1e6 \
  --plant "weight:$planted" --out "$work/run.h5" > "$work/sweep.log" 2>&1 || true
"$python" - "$work/s/sweep.json" "$planted" <<'PY' || { cat "$work/sweep.log"; exit 1; }
import json, sys
row = json.load(open(sys.argv[1]))["strategies"][0]
planted = sys.argv[2]
loc = row.get("localization") or {}
assert row["verdict"] in ("nonfinite", "diverges", "stalls"), row["verdict"]
assert f"first non-finite: module {planted}" in row["message"], row["message"]
assert loc.get("found") and loc.get("modules") == [planted], ("not named exactly", loc)
assert loc["probes"] <= 3, loc["probes"]
print(f"qwen2 {planted} x1e6: {row['verdict']}, keep {loc['modules']} in FP32 after {loc['probes']} probe(s)")
PY
grep -q "localized: keep $planted in FP32" "$work/sweep.log" || { cat "$work/sweep.log"; echo "FAIL: the terminal does not say it"; exit 1; }
