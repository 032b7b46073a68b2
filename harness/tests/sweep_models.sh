#!/usr/bin/env bash
# `ampcheck sweep` over the other model families and frameworks on the CPU (real transformers / lightning as pinned,
# models from configs, nothing downloaded): the HF Trainer script (examples/sweep/hf_train.py) on tiny Llama, BERT
# (masked LM) and T5, the Lightning script and the plain PyTorch loop — one short sweep each, every CPU strategy's row
# checked against the verdict expected for it, and the table the same shape for all five (the same header, one row per
# strategy in the same order, the same sweep.json fields). BERT runs at lr 1e-5, where a bf16 weight cannot take Adam's
# update (< 2^-8 of its value): pure bf16 must be reported as lost updates with the fp32-master fix, while bf16 / fp16
# autocast (fp32 parameters) track. The tiny GPT-2 with a planted fault is harness/tests/sweep.sh (cpu.sweep).
#
# Cost: 5 sweeps x 6 runs, each run a separate Python process whose imports (torch, transformers, lightning) dominate:
# 30 steps of a width-32 model take well under a second, so fewer steps would save little and weaken "tracks".
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
ex=$src/examples/sweep
fail() { echo "FAIL: $*"; exit 1; }
# ctest -j 2 on two cores: one thread per training process (two OpenMP threads each oversubscribe the machine)
export OMP_NUM_THREADS=1
steps=30
# The sweeps to run, by name (default all five: extended.sweep_models, label extended — not part of CI's time).
only=${4:-hf-llama,hf-bert,hf-t5,lightning,plain}

# name | expected verdict per strategy (bf16-autocast fp16-autocast-scaler pure-bf16) | command
sweeps=(
  "hf-llama|tracks tracks tracks|$python $ex/hf_train.py --model llama"
  "hf-bert|tracks tracks lost-updates|$python $ex/hf_train.py --model bert --lr 1e-5"
  "hf-t5|tracks tracks tracks|$python $ex/hf_train.py --model t5"
  "lightning|tracks tracks tracks|$python $ex/lightning_train.py"
  "plain|tracks tracks tracks|$python $ex/plain_loop.py --steps 1000"
)
ran=()
for entry in "${sweeps[@]}"; do
  IFS='|' read -r name expected command <<< "$entry"
  [[ ",$only," == *",$name,"* ]] || continue
  ran+=("$name")
  t0=$SECONDS
  # exit 1 where a row FAILs (a lost-updates row), else 0
  want_rc=0; [[ " $expected " == *" lost-updates "* ]] && want_rc=1
  # shellcheck disable=SC2086  # the command is words
  rc=0; "$ampcheck" sweep --out "$work/$name" --steps $steps --timing-rounds 0 -- $command > "$work/$name.log" 2>&1 || rc=$?
  [ $rc = $want_rc ] || { cat "$work/$name.log"; fail "$name: the sweep exited $rc, wanted $want_rc"; }
  "$python" - "$work/$name" "$name" "$expected" $steps <<'PY' || { cat "$work/$name.log"; exit 1; }
import json, sys
d, name, expected, steps = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
s = json.load(open(f"{d}/sweep.json"))
strategies = ["bf16-autocast", "fp16-autocast-scaler", "pure-bf16"]
assert [r["strategy"] for r in s["strategies"]] == strategies, [r["strategy"] for r in s["strategies"]]
assert s["trainings"] == 6 and s["reused"] == 0, (s["trainings"], s["reused"])
for row, want in zip(s["strategies"], expected):
    assert row["outcome"] == "judged", (name, row)
    if want == "tracks":
        assert row["verdict"] == "tracks" and row["pass"], (name, row)
    else:  # lost updates: a failing verdict whose message names the cause and the fp32-master fix, not a module
        assert row["verdict"] != "tracks" and not row["pass"], (name, row)
        assert "lost updates" in row["message"] and "fp32 master weights" in row["message"], (name, row["message"])
    assert row["speedup"] is not None and row["speedup"] > 0, (name, row)  # step times were recorded
summary = json.load(open(f"{d}/summary.json"))
assert [r["name"] for r in summary["scenarios"]] == strategies, summary["scenarios"]
for r in s["strategies"]:  # the verdict and why (the closest signal's share of its allowance), for the CTest log
    print(f"{name}: {r['strategy']} {r['verdict']}: {r['message'][:110]}")
PY
  echo "$name: $((SECONDS - t0)) s"
  grep -q "RECOMMENDATION: " "$work/$name.log" || fail "$name: no recommendation on the terminal"
  # the table's shape: its header, then the FP32 row and one row per strategy, each with the header's column count
  grep -A4 '^strategy ' "$work/$name.log" > "$work/$name.table"
  [ "$(wc -l < "$work/$name.table")" = 5 ] || { cat "$work/$name.table"; fail "$name: the table has not 5 lines"; }
  # its shape: the header; per row, the strategy column and the number of fields (every row the same)
  awk 'NR==1{print; next} {print substr($0, 1, 22) "|" NF}' "$work/$name.table" | tr -s ' ' > "$work/$name.shape"
  [ "$(tail -4 "$work/$name.shape" | cut -d'|' -f2 | sort -u | wc -l)" = 1 ] \
    || { cat "$work/$name.table"; fail "$name: the table's rows have different numbers of columns"; }
done
[ ${#ran[@]} -ge 2 ] || fail "sweeps '$only': at least two of hf-llama, hf-bert, hf-t5, lightning, plain (the shapes are compared)"
first=${ran[0]}
for name in "${ran[@]:1}"; do
  cmp -s "$work/$first.shape" "$work/$name.shape" \
    || { diff "$work/$first.shape" "$work/$name.shape"; fail "$name: the table's shape differs from $first's"; }
  "$python" -c 'import json,sys; a,b=(json.load(open(f"{p}/sweep.json")) for p in sys.argv[1:]);
assert list(a)==list(b) and [list(r) for r in a["strategies"]]==[list(r) for r in b["strategies"]], (list(a),list(b))' \
    "$work/$first" "$work/$name" || fail "$name: sweep.json has other fields than $first's"
done
echo "sweep_models: all checks passed"
