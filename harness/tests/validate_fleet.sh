#!/usr/bin/env bash
# `ampcheck validate --fleet` under torchrun on Gloo CPU ranks (docs/VALIDATE.md, "A fleet"), on the smallest
# validation scenario (the FP32 MLP, 12 steps) against a golden recorded here first:
#   1. 4 ranks, fault-free: 4 agree, one group, identical to the golden, exit 0; the four report files;
#   2. 4 ranks, rank 2 a persistent bit flip at step 5, rank 3 another stack (ATEN_CPU_CAPABILITY=avx2 for it alone,
#      through a wrapper): rank 2 named (host, device, CPU), persistent, step 5 and the tensor right, exit 1; rank 3 a
#      group of its own, reported as drift with the key, and passing (nobody called corrupt for drift);
#   3. --repeat 5, rank 1 a transient flip in repetition 3 only: rate 1/5, replayed as transient;
#   4. the 2-node shape: two torchrun invocations (--nnodes 2, --node-rank 0 / 1, 2 processes each, c10d rendezvous
#      over loopback): 4 ranks agree;
#   5. bad input: --fleet outside a job; one rank's plant that cannot act and rank 0's --out that exists (refused
#      without --force): every rank exits 2, both named, nothing trained, nothing written.
# Usage: validate_fleet.sh AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
amp=$1; src=$2; py=$3
work=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "work: $work"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sc=$src/scenarios/validate/fp32-mlp-sgd.yaml
refs=$work/refs
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# torchrun with NPROC (default 4) local processes; the arguments after the log are the command of each
fleet() {
  local log=$1; shift
  "$py" -m torch.distributed.run --nproc-per-node "${NPROC:-4}" --master-addr 127.0.0.1 --master-port "$(free_port)" \
    --no-python "$@" > "$log" 2>&1
}
# a rank wrapper: rank 3 computes with ATen's AVX2 kernels, the others with this machine's default
cat > "$work/rank3_avx2.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
if [ "${RANK:-}" = 3 ]; then export ATEN_CPU_CAPABILITY=avx2; fi
exec "$@"
SH
chmod +x "$work/rank3_avx2.sh"

"$amp" validate "$sc" --record --references "$refs" --steps 12 > "$work/record.log"
common=("$sc" --references "$refs" --steps 12 --device cpu)

# 1. fault-free
fleet "$work/clean.log" "$amp" validate --fleet "${common[@]}" --out "$work/clean" ||
  { cat "$work/clean.log"; fail "a fault-free fleet did not pass"; }
for f in summary.json summary.md junit.xml report.html; do [ -s "$work/clean/$f" ] || fail "clean: no $f"; done
"$py" - "$work/clean/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["pass"] and s["world_size"] == 4 and len(s["groups"]) == 1, s["verdict"]
assert [r["status"] for r in s["ranks"]] == ["agrees"] * 4, [r["message"] for r in s["ranks"]]
assert s["groups"][0]["goldens"].startswith("identical to the cpu-"), s["groups"][0]["goldens"]
assert s["exchange"]["backend"] == "gloo" and s["exchange"]["runs_bytes"] > 0, s["exchange"]
PY
grep -q 'tests="4" failures="0"' "$work/clean/junit.xml" || fail "junit: not 4 passing cases"

# 2. a persistent flip on rank 2 and another stack on rank 3
rc=0
fleet "$work/mixed.log" "$work/rank3_avx2.sh" "$amp" validate --fleet "${common[@]}" --out "$work/mixed" \
  --plant-rank '2:bitflip:param:fc.0.weight:0:30@5' || rc=$?
[ $rc = 1 ] || { cat "$work/mixed.log"; fail "persistent flip: exit $rc, expected 1"; }
"$py" - "$work/mixed/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
r = s["ranks"]
# a golden was recorded: it outranks the majority (issue 52), rank 2 is compared with it
assert [x["status"] for x in r] == ["agrees", "agrees", "differs from its golden", "agrees"], [x["message"] for x in r]
f = r[2]["findings"][0]
assert f["first_step"] == 5 and f["tensor"] == "parameter fc.0.weight" and f["replay"] == "persistent", f
assert f["majority_rank"] == -1 and "golden" in f["against"], f
assert r[2]["host"] and r[2]["device"] == "cpu" and r[2]["cpu_model"], r[2]
assert len(s["groups"]) == 2, s["groups"]
drift = s["groups"][1]
assert drift["ranks"] == [3] and "aten_cpu_capability" in drift["drift"] and drift["pass"], drift
assert drift["golden_class"] == "cpu-avx2" and "peers only" in drift["goldens"], drift
assert "configuration drift" in s["verdict"], s["verdict"]
PY
grep -q 'tests="4" failures="1"' "$work/mixed/junit.xml" || fail "junit: not one failing case of 4"
grep -q "rank 2 (.*, cpu, .*) differs from the cpu-[a-z0-9]* golden in 1/1" "$work/mixed.log" ||
  { cat "$work/mixed.log"; fail "rank 2 not named in the output"; }

# 3. --repeat 5 with a transient flip in repetition 3 on rank 1
rc=0
fleet "$work/repeat.log" "$amp" validate --fleet "${common[@]}" --out "$work/repeat" --repeat 5 \
  --plant-rank '1/3:bitflip:param:fc.0.weight:0:30@5:transient' || rc=$?
[ $rc = 1 ] || { cat "$work/repeat.log"; fail "repeat: exit $rc, expected 1"; }
"$py" - "$work/repeat/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["repetitions"] == 5, s["repetitions"]
r = s["ranks"]
assert r[1]["status"] == "differs from its golden" and r[1]["rate"] == "1/5", r[1]
f = r[1]["findings"]
assert len(f) == 1 and f[0]["repetition"] == 3 and f[0]["replay"] == "transient" and f[0]["first_step"] == 5, f
assert all(x["rate"] == "0/5" and x["pass"] for i, x in enumerate(r) if i != 1), r
PY

# 4. the 2-node shape: two torchrun agents on loopback, c10d rendezvous
port=$(free_port)
for node in 0 1; do
  "$py" -m torch.distributed.run --nnodes 2 --node-rank $node --nproc-per-node 2 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "fleet-$$" --no-python \
    "$amp" validate --fleet "${common[@]}" --out "$work/two-nodes" > "$work/node$node.log" 2>&1 &
  pids[$node]=$!
done
rc0=0; rc1=0
wait "${pids[0]}" || rc0=$?
wait "${pids[1]}" || rc1=$?
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { cat "$work/node0.log" "$work/node1.log"; fail "2 nodes: exit $rc0 / $rc1"; }
"$py" -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["pass"] and s["world_size"] == 4 and [r["status"] for r in s["ranks"]] == ["agrees"]*4, s' \
  "$work/two-nodes/summary.json"

# 5. bad input: outside a job
rc=0; "$amp" validate --fleet "${common[@]}" --out "$work/alone" > "$work/alone.log" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "not a rank of a job" "$work/alone.log" || { cat "$work/alone.log"; fail "outside a job: exit $rc"; }
# one rank's bad input stops every rank before anything trains: rank 1's plant cannot act (no such parameter), rank
# 0's --out exists (a run directory: refused without --force); both named, every rank exits 2, nothing written
rc=0; NPROC=2 fleet "$work/bad.log" "$amp" validate --fleet "${common[@]}" --out "$work/clean" \
  --plant-rank '1:bitflip:param:no.such.weight:0:30@5' || rc=$?
grep -q "rank 1 (.*): --plant 'bitflip:param:no.such.weight:0:30@5': the glob 'no.such.weight' matches no parameter" \
  "$work/bad.log" || { cat "$work/bad.log"; fail "rank 1's plant not named"; }
grep -q "rank 0 (.*): .*clean.*refusing to overwrite" "$work/bad.log" || { cat "$work/bad.log"; fail "rank 0's --out not named"; }
# (torchrun stops the other ranks once one exited: each exits 2 or by torchrun's SIGTERM, none with 1)
grep -q "exitcode *: 2" "$work/bad.log" && ! grep -q "exitcode *: 1 " "$work/bad.log" ||
  { cat "$work/bad.log"; fail "bad input: not exit 2"; }
ls -d "$work"/.clean.* 2> /dev/null && fail "bad input left a staging directory"
[ "$(ls "$work/clean")" = "$(printf 'junit.xml\nreport.html\nsummary.json\nsummary.md')" ] || fail "bad input touched --out"
echo "validate --fleet: OK"
