#!/usr/bin/env bash
# Data-parallel failures: (1) rank 1 killed with SIGKILL mid-run: the run ends with an error naming rank 1 and the
# signal, and no rank process is left; (2) rank 1 stopped (SIGSTOP: a hang): rank 0's collective times out after
# distributed.timeout_s, and the run ends with an error naming rank 1 as the one still running; no process is left.
# (3) joined: torchrun starts 2 processes of `ampcheck check` over two scenarios, each process one rank; rank 0
# judges and writes the reports.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
sed 's/^name: dist-fp32-2ranks$/name: dist-long/; s/distributed: {world_size: 2, backend: gloo}/distributed: {world_size: 2, backend: gloo, timeout_s: 5}/' \
  "$src/scenarios/dist-fp32-2ranks.yaml" > "$work/dist-long.yaml"
grep -q "timeout_s: 5" "$work/dist-long.yaml"
wait_for_pids() {
  for _ in $(seq 1 200); do [ -s "$1" ] && [ "$(wc -l < "$1")" = 2 ] && return 0; sleep 0.1; done
  echo "FAIL: no pids file $1"; exit 1
}
no_rank_left() {
  sleep 0.5
  if pgrep -f "_rank $work" > /dev/null; then pgrep -af "_rank $work"; echo "FAIL: $1: a rank process is left"; exit 1; fi
}
for case in kill hang; do
  out=$work/$case
  "$ampcheck" run "$work/dist-long.yaml" --device cpu --steps 3000 --out "$out" > "$work/$case.log" 2>&1 &
  launcher=$!
  # while it runs, the run directory is the staging directory beside --out (usecases/run_directory.h)
  pids=$work/.$case.partial-$launcher/dist-long.ranks/pids
  wait_for_pids "$pids"
  pid1=$(awk '$1 == 1 {print $2}' "$pids")
  # rank 1 well into training before it is killed or stopped: 4 s of its own CPU time (it spends none while it waits
  # for the other rank at the rendezvous; start-up takes 1-3 s under ASan). A fixed 2 s sleep stopped it before the
  # rendezvous on a loaded machine: rank 0 then failed creating the process group, not in a collective.
  for _ in $(seq 1 600); do
    ticks=$(awk '{print $14 + $15}' "/proc/$pid1/stat" 2> /dev/null || echo 0)
    [ "$ticks" -ge $((4 * $(getconf CLK_TCK))) ] && break
    sleep 0.1
  done
  if [ $case = kill ]; then kill -KILL "$pid1"; else kill -STOP "$pid1"; fi
  set +e; wait $launcher; rc=$?; set -e
  msg=$(grep "ampcheck:" "$work/$case.log" | head -1)
  echo "$case: exit $rc: ${msg:0:200}"
  [ $rc != 0 ] || { cat "$work/$case.log"; echo "FAIL: $case: the run did not fail"; exit 1; }
  if [ $case = kill ]; then
    echo "$msg" | grep -q "rank 1 (pid $pid1) was killed by SIGKILL" || { cat "$work/$case.log"; echo "FAIL: kill not named"; exit 1; }
  else
    echo "$msg" | grep -q "rank 1 still running" || { cat "$work/$case.log"; echo "FAIL: hang not named"; exit 1; }
  fi
  no_rank_left $case
  [ ! -e "$out" ] && [ ! -e "$work/.$case.partial-$launcher" ] || { ls -la "$work"; echo "FAIL: $case: a run directory was left"; exit 1; }
done
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" --no-python "$ampcheck" check \
  "$src/scenarios/dist-fp32-2ranks.yaml" "$src/scenarios/dist-reduce-bf16.yaml" --device cpu --out "$work/torchrun" \
  > "$work/torchrun.log" 2>&1 \
  || { cat "$work/torchrun.log"; echo "FAIL: the torchrun job failed"; exit 1; }
"$python" - "$work/torchrun/summary.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["scenarios"]
assert len(c) == 2 and all(x["pass"] and x["distributed"]["launch"] == "environment" for x in c), c
assert all(x["distributed"]["world_size"] == 2 and x["distributed"]["consistency"] == "" for x in c), c
print("torchrun: 2 joined ranks, 2 scenarios in one job:", [(x["name"], x["verdict"]) for x in c])
PY
echo "dist failures: a killed rank and a hung rank end the run naming rank 1, no process left; a torchrun job joined"
