#!/usr/bin/env bash
# A data-parallel run names where it first went non-finite as a single process does (issue 53: the rank files did not
# carry the first non-finite module, so the merged run's message lacked it). The ci scenario
# fp16-autocast-activation-overflow (an activation x 1e5 into block 0's MLP at step 20: "first non-finite: module
# h.0.mlp.c_fc (forward) at step 20") is run as itself and on 2 Gloo ranks: the two messages carry the same
# "first non-finite" clause, and the data-parallel summary row names the module.
# Usage: dist_first_nonfinite.sh AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
amp=$1; src=$2; py=${3:-python3}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
export OMP_NUM_THREADS=1
sed 's/^device: auto/device: cpu/' "$src/scenarios/fp16-autocast-activation-overflow.yaml" > "$w/single.yaml"
sed 's/^name: .*/name: dist-activation-overflow-2ranks/' "$w/single.yaml" > "$w/dist.yaml"
echo "distributed: {world_size: 2, backend: gloo}" >> "$w/dist.yaml"
"$amp" check "$w/single.yaml" "$w/dist.yaml" --out "$w/o" > "$w/log" 2>&1 || true  # (verdicts: not asserted)
"$py" - "$w/o/summary.json" <<'PY' || { cat "$w/log"; exit 1; }
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["scenarios"]}
def clause(name):
    m = rows[name]["message"]
    assert "first non-finite" in m, (name, m)
    return m[m.index("first non-finite"):].split(";")[0]
single, dist = clause("fp16-autocast-activation-overflow"), clause("dist-activation-overflow-2ranks")
assert "module h.0.mlp.c_fc (forward)" in single, single
assert dist == single, (dist, single)
print("dist_first_nonfinite: both say", repr(dist))
PY
