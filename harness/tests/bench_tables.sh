#!/usr/bin/env bash
# bench/throughput_table.py with an nvidia-smi log (--clocks): the samples inside a run's timed windows — and only
# those — give its SM clock, power and energy per step, the power-cap flag follows the throttle bits, a row without
# timing fields shows "-", a repeated header line (appended logs) is skipped, and a malformed log is refused with its
# file and line; rows of several rounds are each set against their own round's torch.compile. Synthetic inputs; no GPU. With the bench binary given: both throughput benchmarks run on the CPU
# (nano, a timed warm-up, windows of 2 steps) and their rows tabulate — a smoke run of what ci/gpu.sh's bench stage
# calls, so a broken script shows here rather than on the GPU machine.
set -euo pipefail
src=$1; python=${2:-python3}; bench=${3:-}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# a run whose 2 windows of 10 steps at 20 and 30 ms/step ended at 1796480000.0 (2026/12/05 14:13:20 UTC): timed from
# ...999.5 to ...000.0; a second, older row without the timing fields
cat > "$work/b.jsonl" <<'J'
{"impl":"ampcheck-cpp","strategy":"bf16-autocast","device":"X","preset":"p","params":1e6,"batch":1,"seq":8,"steps":20,"window":10,"windows_ms":[20.0,30.0],"ended_unix_s":1796480000.0,"median_step_ms":25.0,"min_step_ms":20.0,"max_step_ms":30.0,"tokens_per_s":320.0,"tflops":1.0,"peak_memory_gib":1.0,"probe_every":0,"cuda_graphs":"captured: 1 graph(s)"}
{"impl":"pytorch-python-compile","strategy":"bf16-autocast","device":"X","preset":"p","params":1e6,"batch":1,"seq":8,"steps":20,"median_step_ms":30.0,"min_step_ms":30.0,"max_step_ms":30.0,"tokens_per_s":266.7,"tflops":1.0,"peak_memory_gib":1.0}
J
cat > "$work/c.csv" <<'C'
timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, power.draw [W], clocks_event_reasons.active
2026/12/05 14:13:19.300, 1980 MHz, 2619 MHz, 50, 100.00 W, 0x0000000000000000
2026/12/05 14:13:19.600, 1700 MHz, 2619 MHz, 60, 690.00 W, 0x0000000000000004
2026/12/05 14:13:19.850, 1800 MHz, 2619 MHz, 60, 700.00 W, 0x0000000000000004
timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, power.draw [W], clocks_event_reasons.active
2026/12/05 14:13:19.950, 1900 MHz, 2619 MHz, 61, 650.00 W, 0x0000000000000000
2026/12/05 14:13:20.200, 1980 MHz, 2619 MHz, 55, 120.00 W, 0x0000000000000000
C
"$python" "$src/bench/throughput_table.py" "$work/b.jsonl" --clocks "$work/c.csv" > "$work/t.md"
cat "$work/t.md"
# inside the windows: 1700/1800/1900 MHz, 690/700/650 W (two of three capped): medians 1800 MHz, 690 W; 690 W x 25 ms
grep -q "| 1800 | 690 (cap) | 17.2 |$" "$work/t.md" || { echo "FAIL: clock cells of the timed run"; exit 1; }
grep -q "pytorch-python-compile .*| - | - | - |$" "$work/t.md" || { echo "FAIL: a row without timing fields"; exit 1; }
# two rounds in one call (ci/gpu.sh BENCH_ROUNDS=2): each engine row against the torch.compile row before it (30 ms,
# then 40 ms a step), not against the last one of the file; the eager row, read before any compile row, against the last
r() { echo "{\"impl\":\"$1\",\"strategy\":\"bf16-autocast\",\"device\":\"X\",\"preset\":\"p\",\"params\":1e6,\"batch\":1,\"seq\":8,\"steps\":20,\"median_step_ms\":$2,\"min_step_ms\":$2,\"max_step_ms\":$2,\"tokens_per_s\":$3,\"tflops\":1.0,\"peak_memory_gib\":1.0}"; }
{ r pytorch-python-eager 50 160; r pytorch-python-compile 30 266.7; r ampcheck-cpp 25 320; r pytorch-python-compile 40 200
  r ampcheck-cpp 25 320; } > "$work/rounds.jsonl"
"$python" "$src/bench/throughput_table.py" "$work/rounds.jsonl" | grep '^| ' | tail -n 5 | cut -d'|' -f2,12 | tr -d ' ' > "$work/rounds.txt"
printf 'pytorch-python-eager|0.800\npytorch-python-compile|1.000\nampcheck-cpp|1.200\npytorch-python-compile|1.000\nampcheck-cpp|1.600\n' |
  diff - "$work/rounds.txt" || { echo "FAIL: rounds paired with the wrong torch.compile"; exit 1; }
printf 'timestamp, clocks.current.sm [MHz]\n2026/12/05 14:13:19.600, fast, x\n' > "$work/bad.csv"
if "$python" "$src/bench/throughput_table.py" "$work/b.jsonl" --clocks "$work/bad.csv" > "$work/o" 2>&1; then
  echo "FAIL: a malformed log was read"; exit 1
fi
grep -q "bad.csv:2: expected" "$work/o" || { cat "$work/o"; exit 1; }
if [ -n "$bench" ]; then
  "$bench" --preset nano --batch 2 --steps 4 --window 2 --warmup 1 --warmup-seconds 0.2 --probe-every 0 --fast \
    --device cpu > "$work/real.jsonl"
  "$python" "$src/bench/gpt_baseline.py" --preset nano --strategy bf16-autocast --batch 2 --steps 4 --window 2 --warmup 1 \
    --warmup-seconds 0.2 --device cpu >> "$work/real.jsonl"
  "$python" - "$work/real.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["impl"] for r in rows] == ["ampcheck-cpp", "pytorch-python-eager"], rows
for r in rows:
    assert r["window"] == 2 and len(r["windows_ms"]) == 2 and all(w > 0 for w in r["windows_ms"]), r
    assert r["warmup_seconds"] == 0.2 and r["ended_unix_s"] > 1.7e9 and r["tokens_per_s"] > 0, r
PY
  "$python" "$src/bench/throughput_table.py" "$work/real.jsonl" > "$work/real.md"
  [ "$(grep -c '^| ampcheck-cpp \|^| pytorch-python-eager ' "$work/real.md")" = 2 ] || { cat "$work/real.md"; exit 1; }
fi
echo "bench_tables: clock, power and energy from the timed windows' samples; a malformed log refused; rounds paired${bench:+; both benchmarks ran}"
