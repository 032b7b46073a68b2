#!/usr/bin/env bash
# `ampcheck sweep` keeps its promises against a careless user and a planted directory (issue 51): nothing outside --out
# is written, read or deleted through a link inside it; no stale result is reused; bad options are refused before
# training; the exit code and the messages say what is true. One tiny plain loop (Recorder, 6 steps of an MLP) that
# misbehaves on request:
#   1. its FP32 run crashes (after a 1 GiB sparse log): exit 2, the log's last line quoted, the sweep's peak memory far
#      below the log's size (only the tail is read);
#   2. the crash fixed (a flag file the command line does not name): the crashed FP32 run is trained again, not reused;
#   3. links planted inside the sweep directory (runs/<key>, logs/<key>, plans/<key>, runs, a recording) to a folder
#      elsewhere: each refused (exit 2) naming the link, with and without --force; the folder unchanged (sha256);
#   4. the script edited (lr), argv the same: a new key, every run trained again; a sweep after it reuses them and
#      says what reusing assumes;
#   5. the model changed where the key cannot see (a file the command line does not name): the HINT says --force or
#      another --out;
#   6. a strategy that fails: exit 1;
#   7. --device cuda without a GPU, --strategies '' and a strategy named twice: exit 2, nothing trained;
#   8. messages: judge against a reference that does not exist says so; a reference whose spread is a skip run says what it is.
# The lock (two sweeps into one --out) and signals: harness/tests/sweep_signals.py.
set -euo pipefail
ampcheck=$1; src=$2; python=${3:-python3}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
failed=0  # KEEP_GOING=1: every check runs and reports (to see each fail against an older ampcheck), exit 1 at the end
fail() { echo "FAIL: $*"; failed=$((failed + 1)); [ -n "${KEEP_GOING:-}" ] || exit 1; }
export OMP_NUM_THREADS=1
t0=$SECONDS

cat > "$w/train.py" <<PY
# a plain loop recorded with ampcheck's Recorder, which misbehaves on request
import os, sys
sys.path.insert(0, "$src/python/src")
import torch
from ampcheck import Recorder
from ampcheck.plan import current_plan
plan = current_plan()
crash = plan.strategy == "fp32" and os.path.exists("$w/crash")
if plan.strategy == "pure-bf16":
    raise RuntimeError("planted failure of pure-bf16")
width = int(open("$w/width").read())  # read by a name the command line does not hold
lr = 0.05
torch.manual_seed(plan.seed_offset)  # the seed run's offset reaches the init (else refused: bit-identical)
model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
opt = torch.optim.SGD(model.parameters(), lr=lr)
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
with Recorder("unused.h5", model, opt) as rec:
    for step in range(6):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
        if crash and step == 2:  # a 1 GiB log (sparse), its last line, and a crash: recorded as an error run
            os.ftruncate(1, 1 << 30)
            print("the last line of a long log", flush=True)
            raise RuntimeError("planted crash in the FP32 run")
PY
s=$w/s
cmd=("$python" "$w/train.py")
sweep() { "$ampcheck" sweep --out "$s" --steps 6 --timing-rounds 0 "$@"; }  # (no timing re-runs: CI time)
run() {  # run WANT_RC LOG ARGS...: the sweep with ARGS, its exit code checked
  local want=$1 log=$2; shift 2
  local rc=0; sweep "$@" > "$log" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { tail -20 "$log"; fail "sweep $*: exit $rc, wanted $want"; }
}
json() { "$python" -c "import json,sys; print(json.load(open('$s/sweep.json'))$1)"; }

# 1. the FP32 run crashes after a 1 GiB log: exit 2 quoting its end; peak memory (ru_maxrss of the sweep and its
#    children) well below the log
touch "$w/crash"; echo 16 > "$w/width"
rss_kb=$("$python" - "$ampcheck" "$s" "${cmd[@]}" > "$w/1.log" 2>&1 <<'PY' && tail -1 "$w/1.log"
import resource, subprocess, sys
amp, out, *cmd = sys.argv[1:]
rc = subprocess.call([amp, "sweep", "--out", out, "--steps", "6", "--strategies", "bf16-autocast", "--"] + cmd)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
) || fail "the memory probe failed"
read -r rc1 kb1 <<< "$rss_kb"
[ "$rc1" = 2 ] || { cat "$w/1.log"; fail "a crashed FP32 run: exit $rc1, wanted 2"; }
grep -q "the last line of a long log" "$w/1.log" && grep -q "planted crash in the FP32 run" "$w/1.log" \
  || { tail -20 "$w/1.log"; fail "the crash's log end is not quoted"; }
[ "$kb1" -lt 1000000 ] || fail "peak memory ${kb1} kB with a 1 GiB log: the whole log was read"
echo "ok 1: a crashed FP32 run: exit 2, its log's end quoted, peak memory $((kb1 / 1024)) MiB beside a 1 GiB log"

# 2. fixed (the flag file is not on the command line: the key is the same): the crashed run is not reused
rm "$w/crash"
run 0 "$w/2.log" --strategies bf16-autocast -- "${cmd[@]}"
key=$(json "['key']")
grep -q "  fp32: not reusing .* (status error): trained again" "$w/2.log" || { cat "$w/2.log"; fail "2: no word of the crashed run"; }
[ "$(json "['trainings']")" = 4 ] || { cat "$w/2.log"; fail "2: the crashed FP32 recording was reused"; }
echo "ok 2: the crashed FP32 run was trained again (4 trainings), the sweep passed"

# 3. links inside the sweep directory: refused, naming the link; nothing changes in what they point to
snapshot() { find "$w/elsewhere" -printf '%p %y\n' | sort && find "$w/elsewhere" -type f -print0 | sort -z | xargs -0 sha256sum; }
links=0
plant() {  # plant REL [--force]: REL (under the sweep directory) moved to $w/elsewhere and replaced by a link to it
  local rel=$1; shift
  mv "$s/$rel" "$w/elsewhere"; ln -s "$w/elsewhere" "$s/$rel"
  local before; before=$(snapshot)
  run 2 "$w/3.log" --strategies bf16-autocast,fp16-autocast-scaler "$@" -- "${cmd[@]}"
  grep -q "$s/$rel: a symbolic link (to $w/elsewhere) inside the sweep directory" "$w/3.log" \
    || { cat "$w/3.log"; fail "3: the link $rel is not named"; }
  grep -q "HINT: remove the link" "$w/3.log" || fail "3: no HINT for $rel"
  ! grep -q "(bf16-autocast) \.\.\.\|(fp16-autocast-scaler) \.\.\." "$w/3.log" || fail "3: trained with $rel a link"
  [ "$(snapshot)" = "$before" ] || fail "3: $w/elsewhere changed through the link $rel"
  rm "$s/$rel"; mv "$w/elsewhere" "$s/$rel"
  links=$((links + 1))
}
plant "runs/$key"
plant "logs/$key" --force
plant "plans/$key"
plant runs --force
plant "runs/$key/fp32.h5"
echo "ok 3: $links planted links refused by name, what they lead to unchanged"

# 4. the script edited (lr), argv the same: trained again under a new key; then reused, saying what that assumes
sed -i 's/^lr = 0.05$/lr = 0.04/' "$w/train.py"
run 0 "$w/4.log" --strategies bf16-autocast -- "${cmd[@]}"
[ "$(json "['key']")" != "$key" ] && [ "$(json "['trainings']")" = 4 ] \
  || { cat "$w/4.log"; fail "4: an edited script reused the old runs"; }
run 0 "$w/4b.log" --strategies bf16-autocast -- "${cmd[@]}"
grep -q ": 0 trainings, 4 reused" "$w/4b.log" || { cat "$w/4b.log"; fail "4: the unchanged sweep trained again"; }
grep -q "it assumes nothing else the command reads" "$w/4b.log" && grep -q "$w/train.py" "$w/4b.log" \
  || { cat "$w/4b.log"; fail "4: a reuse that does not say what it assumes"; }
echo "ok 4: an edited script trains again (new key); the reuse after it names what it assumes"

# 5. the model changed where the key cannot see: the sweep's HINT, not judge's
echo 24 > "$w/width"
run 2 "$w/5.log" --strategies bf16-autocast,fp16-autocast-scaler -- "${cmd[@]}"
grep -q "not the same training" "$w/5.log" && grep -q "HINT: .*pass --force to train every run again, or name another --out" "$w/5.log" \
  || { cat "$w/5.log"; fail "5: a model change without the sweep's HINT"; }
! grep -q "judge a run against a reference" "$w/5.log" || fail "5: judge's HINT in a sweep"
echo 16 > "$w/width"
echo "ok 5: a model change names --force / another --out"

# 6. a strategy that fails (an error row): exit 1
run 1 "$w/6.log" --strategies pure-bf16 -- "${cmd[@]}"
grep -q "planted failure of pure-bf16" "$s/sweep.json" || fail "6: no error row"
echo "ok 6: a FAIL row exits 1"

# 7. refused before training: --device cuda without a GPU, an empty --strategies, a strategy named twice
before=$(find "$s" | sort)
if ! "$python" -c "import torch, sys; sys.exit(torch.cuda.is_available())"; then
  echo "(a GPU is visible: --device cuda is not refused here)"
else
  run 2 "$w/7.log" --device cuda -- "${cmd[@]}"
  grep -q -- "--device cuda: no CUDA device" "$w/7.log" || { cat "$w/7.log"; fail "7: --device cuda on a CPU"; }
fi
run 2 "$w/7.log" --strategies '' -- "${cmd[@]}"
grep -q "an empty strategy name" "$w/7.log" || { cat "$w/7.log"; fail "7: --strategies ''"; }
run 2 "$w/7.log" --strategies bf16-autocast,pure-bf16,bf16-autocast -- "${cmd[@]}"
grep -q "'bf16-autocast' is named twice" "$w/7.log" || { cat "$w/7.log"; fail "7: a strategy named twice"; }
[ "$(find "$s" | sort)" = "$before" ] || fail "7: a refused sweep wrote into $s"
echo "ok 7: --device cuda without a GPU, --strategies '' and a duplicate: exit 2, nothing written"

# 8. messages that say what is true
r=$s/runs/$(json "['key']")
rc=0; "$ampcheck" judge "$r/fp32.h5" --reference "$w/missing.h5" --out "$w/j" > "$w/8.log" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "missing.h5: does not exist" "$w/8.log" && ! grep -q "regenerate" "$w/8.log" \
  || { cat "$w/8.log"; fail "8: judge against a missing reference (exit $rc)"; }
rc=0; "$ampcheck" reference "$r/fp32.h5" --spread "skip:$r/fp32-skip.h5" --out "$w/r.h5" > "$w/8.log" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "no seed or order run among the spread runs (skip:" "$w/8.log" && ! grep -q "ulp nudge" "$w/8.log" \
  || { cat "$w/8.log"; fail "8: a skip-only spread (exit $rc)"; }
echo "ok 8: a missing file 'does not exist'; a skip-only spread is named as such"
[ "$failed" = 0 ] || { echo "sweep_safety: $failed checks failed"; exit 1; }
echo "sweep_safety: all checks passed ($((SECONDS - t0)) s)"
