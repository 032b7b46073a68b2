#!/usr/bin/env bash
# Who `ampcheck validate --fleet` blames (issue 52, item 5), on Gloo CPU ranks under torchrun (the FP32 MLP at 12
# steps). One CTest per CASE:
#   pair    ranks 1 and 2 carry the same persistent bit flip, rank 0 is healthy. With a golden (recorded here) that
#           rank 0 matches bit for bit: ranks 1 and 2 blamed against the golden, rank 0 cleared, exit 1 (before: rank
#           0 named the outlier, never cleared). Without a golden: "cannot tell which side", nobody named an outlier
#           (before: rank 0 the only failure, the faulty pair passed);
#   nonfinite  rank 2 alone in a drift group (MKL_CBWR=COMPATIBLE) whose run went non-finite through an exponent
#           flip: a fault, exit 1 (before: "agrees", exit 0);
#   split   4 ranks, ranks 2 and 3 the same flip (a 2-2 split) with a golden: ranks 0,1 cleared by the golden, ranks 2,3
#           blamed (before: "no majority" on every rank, "no golden compared"). Also: a plant with no effect on rank
#           1 is said in the report, and every finding of a rank is in its table row;
#   statistical  (a) 4 ranks, ranks 1-3 the same exponent flip (their runs go non-finite), rank 0 healthy, no golden:
#           ranks 1-3 non-finite, rank 0 not blamed — a failing majority does not outvote a sound run (before: rank 0
#           named the outlier of a majority of 3). (b) 2 ranks, both with the flip, no references: both non-finite
#           — the scenario expects its run to complete (before: no rank completed, so nobody was blamed: exit 0).
#           (c) the same with rank 1 alone in a drift group and the FP32 references of validate's statistical verdict
#           in the reference root: both non-finite, their rows with their statistical verdicts.
# Usage: fleet_blame.sh CASE AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
case_=$1; amp=$2; src=$3; py=$4
work=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "work: $work"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL ($case_): $*"; exit 1; }
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fleet() {
  local log=$1; shift
  "$py" -m torch.distributed.run --nproc-per-node "$NPROC" --master-addr 127.0.0.1 --master-port "$(free_port)" \
    --no-python "$@" > "$log" 2>&1
}
sc=$src/scenarios/validate/fp32-mlp-sgd.yaml
flip='bitflip:param:fc.0.weight:0:22@5'  # persistent, finite: the run differs from step 5 on
record() { "$amp" validate "$sc" --record --references "$work/refs" --steps 12 > "$work/record.log" 2>&1 ||
  { cat "$work/record.log"; fail "recording the golden"; }; }
# summary.json's rank statuses as "s0 s1 ..." (a status with spaces keeps them: '|' separates)
statuses() { "$py" -c 'import json,sys; print("|".join(r["status"] for r in json.load(open(sys.argv[1]))["ranks"]))' "$1"; }

case $case_ in
pair)
  record
  rc=0
  NPROC=3 fleet "$work/golden.log" "$amp" validate --fleet "$sc" --references "$work/refs" --steps 12 --device cpu \
    --out "$work/golden" --plant-rank "1:$flip" --plant-rank "2:$flip" || rc=$?
  [ $rc = 1 ] || { cat "$work/golden.log"; fail "with a golden: exit $rc, expected 1"; }
  "$py" - "$work/golden/summary.json" << 'PY' || { cat "$work/golden.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
assert r[0]["pass"] and r[0]["status"] == "agrees", r[0]["message"]
assert "golden" in r[0]["message"], r[0]["message"]
for k in (1, 2):
    assert not r[k]["pass"] and r[k]["status"] == "differs from its golden", r[k]["message"]
    assert r[k]["findings"] and r[k]["findings"][0]["first_step"] == 5, r[k]["findings"]
    assert r[k]["findings"][0]["majority_rank"] == -1 and "golden" in r[k]["findings"][0]["against"], r[k]["findings"]
assert "ranks 1,2" in s["verdict"] or ("rank 1" in s["verdict"] and "rank 2" in s["verdict"]), s["verdict"]
print("with a golden:", s["verdict"])
PY
  rc=0
  NPROC=3 fleet "$work/peers.log" "$amp" validate --fleet "$sc" --references "$work/no-refs" --steps 12 --device cpu \
    --out "$work/peers" --plant-rank "1:$flip" --plant-rank "2:$flip" || rc=$?
  [ $rc = 1 ] || { cat "$work/peers.log"; fail "without a golden: exit $rc, expected 1 (the ranks disagree)"; }
  "$py" - "$work/peers/summary.json" << 'PY' || { cat "$work/peers.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
assert [x["status"] for x in r] == ["cannot tell"] * 3, [x["message"] for x in r]
assert all("cannot tell which side" in x["message"] for x in r), [x["message"] for x in r]
assert "cannot tell which side" in s["verdict"] and "outlier" not in s["verdict"], s["verdict"]
print("without a golden:", s["verdict"])
PY
  ;;
nonfinite)
  cat > "$work/drift.sh" << 'SH'
#!/usr/bin/env bash
if [ "${RANK:-}" = 2 ]; then export MKL_CBWR=COMPATIBLE; fi
exec "$@"
SH
  chmod +x "$work/drift.sh"
  rc=0
  NPROC=3 fleet "$work/log" "$work/drift.sh" "$amp" validate --fleet "$sc" --references "$work/no-refs" --steps 12 \
    --device cpu --out "$work/out" --plant-rank '2:bitflip:param:fc.0.weight:0:30@5' || rc=$?
  [ $rc = 1 ] || { cat "$work/log"; fail "drift + non-finite: exit $rc, expected 1"; }
  "$py" - "$work/out/summary.json" << 'PY' || { cat "$work/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
assert len(s["groups"]) == 2 and s["groups"][1]["ranks"] == [2] and "MKL_CBWR" in s["groups"][1]["drift"], s["groups"]
assert r[0]["pass"] and r[1]["pass"], [x["message"] for x in r]
assert not r[2]["pass"] and r[2]["status"] == "non-finite", r[2]["message"]
assert "non-finite" in r[2]["message"] and "MKL_CBWR" in r[2]["message"], r[2]["message"]
print(r[2]["message"])
PY
  ;;
split)
  record
  rc=0
  NPROC=4 fleet "$work/log" "$amp" validate --fleet "$sc" --references "$work/refs" --steps 12 --device cpu \
    --out "$work/out" --repeat 2 --plant-rank "2:$flip" --plant-rank "3:$flip" \
    --plant-rank '3/2:bitflip:param:fc.1.weight:1:21@8' \
    --plant-rank '1:bitflip:param:fc.0.bias:0:10@0' || rc=$?
  [ $rc = 1 ] || { cat "$work/log"; fail "2-2 split with a golden: exit $rc, expected 1"; }
  "$py" - "$work/out/summary.json" "$work/out/summary.md" << 'PY' || { cat "$work/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
md = open(sys.argv[2]).read()
r = s["ranks"]
assert [x["pass"] for x in r] == [True, True, False, False], [x["message"] for x in r]
assert r[2]["status"] == r[3]["status"] == "differs from its golden", [x["message"] for x in r]
assert "no golden compared" not in json.dumps(s), "no golden compared"
# rank 1's plant (a low exponent bit of a zero bias at step 0: 1.4e-42, absorbed by the update) changes nothing: said in its row and the verdict
assert "no measurable effect" in r[1]["message"], r[1]["message"]
assert "no measurable effect" in s["verdict"], s["verdict"]
# rank 3: a finding per repetition, every one in its row (summary.md's table) and its message
assert len(r[3]["findings"]) == 2, r[3]["findings"]
row = [l for l in md.splitlines() if l.startswith("| 3 |")][0]
assert "repetition 1" in row and "repetition 2" in row, row
assert "repetition 1" in r[3]["message"] and "repetition 2" in r[3]["message"], r[3]["message"]
print(s["verdict"])
PY
  ;;
statistical)
  big='bitflip:param:fc.0.weight:0:30@5'  # an exponent flip: the run goes non-finite at step 5
  rc=0
  NPROC=4 fleet "$work/majority.log" "$amp" validate --fleet "$sc" --references "$work/no-refs" --steps 12 --device cpu \
    --out "$work/majority" --plant-rank "1:$big" --plant-rank "2:$big" --plant-rank "3:$big" || rc=$?
  [ $rc = 1 ] || { cat "$work/majority.log"; fail "a non-finite majority: exit $rc, expected 1"; }
  "$py" - "$work/majority/summary.json" << 'PY' || { cat "$work/majority.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
assert r[0]["pass"] and r[0]["status"] == "agrees", r[0]["message"]
assert "not blamed" in r[0]["message"] and "non-finite" in r[0]["message"], r[0]["message"]
assert [x["status"] for x in r[1:]] == ["non-finite"] * 3, [x["message"] for x in r]
print("a non-finite majority:", s["verdict"])
PY
  rc=0
  NPROC=2 fleet "$work/none.log" "$amp" validate --fleet "$sc" --references "$work/no-refs" --steps 12 --device cpu \
    --out "$work/none" --plant-rank "0:$big" --plant-rank "1:$big" || rc=$?
  [ $rc = 1 ] || { cat "$work/none.log"; fail "every rank non-finite, no references: exit $rc, expected 1"; }
  "$py" - "$work/none/summary.json" << 'PY' || { cat "$work/none.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
for x in s["ranks"]:
    assert not x["pass"] and x["status"] == "non-finite", x["message"]
    assert "no rank's run completed (the scenario expects its run to complete)" in x["message"], x["message"]
    assert x["statistical"] == "", x["statistical"]  # no FP32 references: not judged
print("every rank non-finite, no references:", s["verdict"])
PY
  "$amp" record "$sc" --references "$work/fp32" --steps 12 > "$work/record.log" 2>&1 ||
    { cat "$work/record.log"; fail "recording the FP32 references"; }
  cat > "$work/drift.sh" << 'SH'
#!/usr/bin/env bash
if [ "${RANK:-}" = 1 ]; then export MKL_CBWR=COMPATIBLE; fi
exec "$@"
SH
  chmod +x "$work/drift.sh"
  rc=0
  NPROC=2 fleet "$work/all.log" "$work/drift.sh" "$amp" validate --fleet "$sc" --references "$work/fp32" --steps 12 \
    --device cpu --out "$work/all" --plant-rank "0:$big" --plant-rank "1:$big" || rc=$?
  [ $rc = 1 ] || { cat "$work/all.log"; fail "every rank non-finite against the FP32 references: exit $rc, expected 1"; }
  "$py" - "$work/all/summary.json" << 'PY' || { cat "$work/all.log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
assert len(s["groups"]) == 2 and s["groups"][1]["ranks"] == [1], s["groups"]
for x in r:
    assert not x["pass"] and x["status"] == "non-finite", x["message"]
    assert "statistical verdict against the cpu FP32 references is nonfinite" in x["message"], x["message"]
    assert x["statistical"].startswith("fails the cpu FP32 references in 1 of 1 run"), x["statistical"]
print("every rank non-finite:", s["verdict"])
PY
  ;;
*) fail "unknown case" ;;
esac
echo "validate --fleet blame ($case_): OK"
