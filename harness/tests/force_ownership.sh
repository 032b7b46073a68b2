#!/usr/bin/env bash
# --force replaces only what ampcheck made (issue 39): every command that writes (judge, check, check --jobs, run,
# validate, localize, sweep into a run directory; reference, record and validate --record into a file; report into a run directory)
# is pointed with --force at what is not its own — a directory of the user's .h5 recordings (the judged run inside
# it), a copy of references/cpu, a symbolic link to the recordings, a marker-less directory holding only summary.json
# and x.h5 (an old run or not, ampcheck cannot tell), directories whose .ampcheck-run is a link or other text, a
# user's recording, a text file and a link as a single-file output. Each is refused (exit 2, "not ... ampcheck
# wrote", nothing trained) and nothing changes: the file list and the sha256 of every file are the same before and
# after. Then each command's own previous output is replaced. Also (names): a dangling-symlink --out, two scenarios of
# one name and a 300-byte name are refused before training; a 128-byte name is written.
# Usage: force_ownership.sh AMPCHECK SOURCE_DIR
set -euo pipefail
amp=$1; src=$2
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

# --- a tiny scenario (4 steps of a small MLP) and what ampcheck makes from it ---------------------------------------
scenario() {  # scenario FILE NAME
  cat > "$1" <<EOF
name: $2
why: "A tiny FP32 MLP for the ownership test."
device: cpu
seed: 7
model: {kind: mlp, preset: tiny, n_layer: 1, n_embd: 16, mlp_hidden: 32}
data: {kind: synthetic, batch_size: 4, seq_len: 8, corpus_tokens: 4096}
optimizer: {kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0}
schedule: {kind: constant}
train: {steps: 4}
strategy: fp32
expect: {verdict: tracks}
EOF
}
sc=$w/tiny.yaml; scenario "$sc" tiny-mlp
sc2=$w/tiny2.yaml; scenario "$sc2" tiny-mlp-2                   # (the same training: one reference for both)
"$amp" run "$sc" --out "$w/rec" > /dev/null                      # a recording: $w/rec/tiny-mlp.h5
"$amp" record "$sc" --references "$w/refs" > /dev/null           # ampcheck's FP32 reference of it
# its seed run (another init seed: a seed run bit-identical to the FP32 run is refused, issue 52)
sed "s/^name: tiny-mlp$/name: tiny-mlp-seed/; s/^seed: 7$/seed: 8/" "$sc" > "$w/tiny-seed.yaml"
"$amp" run "$w/tiny-seed.yaml" --out "$w/recseed" > /dev/null   # $w/recseed/tiny-mlp-seed.h5
seed_run=$w/recseed/tiny-mlp-seed.h5
"$amp" reference "$w/rec/tiny-mlp.h5" --spread "seed:$seed_run" --out "$w/R.h5" > /dev/null
"$amp" validate "$sc" --record --references "$w/gold" > /dev/null  # ampcheck's golden of it
ref_file=$(ls "$w"/refs/*/*.h5); golden=$(ls "$w"/gold/validate/*/tiny-mlp.h5)

# --- what is not ampcheck's: under $w/p, checksummed before and after ------------------------------------------------
p=$w/p; mkdir -p "$p/user" "$p/oldrun" "$p/fake-link" "$p/fake-text"
for f in fp16 fp32 fp32-seed; do cp "$w/rec/tiny-mlp.h5" "$p/user/$f.h5"; done
echo "notes on the runs" > "$p/user/notes.txt"
cp -r "$src/references/cpu" "$p/refcopy"
ln -s "$p/user" "$p/link"
echo '{"scenarios": []}' > "$p/oldrun/summary.json"; cp "$w/rec/tiny-mlp.h5" "$p/oldrun/x.h5"
ln -s "$w/refs" "$p/fake-link/.ampcheck-run"; cp "$w/rec/tiny-mlp.h5" "$p/fake-link/x.h5"
echo "my own notes" > "$p/fake-text/.ampcheck-run"; cp "$w/rec/tiny-mlp.h5" "$p/fake-text/x.h5"
cp "$w/rec/tiny-mlp.h5" "$p/recording.h5"; echo "not hdf5" > "$p/notes.h5"; ln -s "$w/R.h5" "$p/ref-link.h5"
mkdir -p "$p/userrefs"; cp -r "$w/refs/." "$p/userrefs/"; cp "$w/rec/tiny-mlp.h5" "$p/userrefs/${ref_file#"$w"/refs/}"
mkdir -p "$p/usergold"; cp -r "$w/gold/." "$p/usergold/"; cp "$w/rec/tiny-mlp.h5" "$p/usergold/${golden#"$w"/gold/}"
snapshot() { (cd "$p" && find . -printf '%p %y %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(snapshot)
echo "protected: $(cd "$p" && find . -type f | wc -l) files in $(cd "$p" && find . -mindepth 1 -maxdepth 1 | wc -l) entries"

refused=0
expect_refusal() {  # expect_refusal WHAT WORDS... -- COMMAND...
  local what=$1 words=$2; shift 3
  local rc=0; "$@" > "$w/log" 2>&1 || rc=$?
  [ $rc -eq 2 ] || { cat "$w/log"; fail "$what: exit $rc, wanted 2"; }
  grep -q -- "$words" "$w/log" || { cat "$w/log"; fail "$what: no '$words' in the message"; }
  grep -q "HINT: pass --force" "$w/log" && { cat "$w/log"; fail "$what: hints --force at what is not ampcheck's"; }
  # (validate --record checks each golden as its turn comes: after its "[1/1]" line, before its training)
  [ "${header_ok:-}" = 1 ] || ! grep -q "^\[1/" "$w/log" || fail "$what: trained before refusing"
  refused=$((refused + 1))
  echo "ok: $what: exit 2: $(grep -o 'ampcheck: .*' "$w/log" | head -1 | cut -c1-150)"
}
vsc=$src/scenarios/validate/fp32-mlp-sgd.yaml
for t in user refcopy link oldrun fake-link fake-text; do
  d=$p/$t
  expect_refusal "judge --out $t" "not a run directory of ampcheck" -- \
    "$amp" judge "$p/user/fp16.h5" --reference "$w/R.h5" --out "$d" --force
  expect_refusal "check --out $t" "not a run directory of ampcheck" -- \
    "$amp" check "$sc" --jobs 1 --references "$w/refs" --out "$d" --force
  expect_refusal "run --out $t" "not a run directory of ampcheck" -- "$amp" run "$sc" --out "$d" --force
  expect_refusal "validate --out $t" "not a run directory of ampcheck" -- \
    "$amp" validate "$vsc" --device cpu --out "$d" --force
done
expect_refusal "check --jobs 2 --out user" "not a run directory of ampcheck" -- \
  "$amp" check "$sc" "$sc2" --jobs 2 --references "$w/refs" --out "$p/user" --force
for t in user oldrun fake-text; do  # localize and sweep: the same run directories, refused before any training
  expect_refusal "localize --out $t" "not a run directory of ampcheck" -- \
    "$amp" localize "$sc" --references "$w/refs" --out "$p/$t" --force
  expect_refusal "sweep --out $t" "not a run directory of ampcheck" -- "$amp" sweep --out "$p/$t" --force -- true
done
for t in recording.h5 notes.h5 ref-link.h5 user; do
  expect_refusal "reference --out $t" "refusing to replace" -- \
    "$amp" reference "$w/rec/tiny-mlp.h5" --spread "seed:$seed_run" --out "$p/$t" --force
done
expect_refusal "reference --out its own input" "not an FP32 reference ampcheck wrote" -- \
  "$amp" reference "$p/user/fp32.h5" --spread "seed:$p/user/fp32-seed.h5" --out "$p/user/fp32.h5" --force
expect_refusal "record --force over a recording" "not an FP32 reference ampcheck wrote" -- \
  "$amp" record "$sc" --references "$p/userrefs" --force
header_ok=1 expect_refusal "validate --record --force over a recording" "not a golden trajectory ampcheck wrote" -- \
  "$amp" validate "$sc" --record --references "$p/usergold" --force
[ "$(snapshot)" = "$before" ] || { diff <(echo "$before") <(snapshot) | head; fail "a protected file changed"; }
echo "refused: $refused; the protected files (list and sha256) are unchanged"

# --- report: replaces only its own report files ------------------------------------------------------------------------
"$amp" check "$sc" --jobs 1 --references "$w/refs" --out "$w/own-check" > /dev/null
echo "<p>my page</p>" > "$w/own-check/report.html"; sum=$(sha256sum < "$w/own-check/report.html")
expect_refusal "report --force over a user's report.html" "not a report ampcheck wrote" -- \
  "$amp" report "$w/own-check" --force
[ "$(sha256sum < "$w/own-check/report.html")" = "$sum" ] || fail "report replaced the user's report.html"

# --- ampcheck's own previous output: replaced ----------------------------------------------------------------------
replaced() {  # replaced WHAT PATH -- COMMAND...: PATH exists (ampcheck's), the command replaces it (a new inode)
  local what=$1 path=$2; shift 3
  local ino; ino=$(stat -c %i "$path")
  local rc=0; "$@" > "$w/log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || { cat "$w/log"; fail "$what over ampcheck's own output: exit $rc"; }
  [ "$(stat -c %i "$path")" != "$ino" ] || fail "$what: $path not replaced"
  if [ -d "$path" ]; then
    [ "$(head -1 "$path/.ampcheck-run")" = "a run directory written by ampcheck" ] || fail "$what: no marker in $path"
    [ ! -e "$path/INCOMPLETE" ] || fail "$what: INCOMPLETE left in $path"
  fi
  echo "ok: $what --force over ampcheck's own output: replaced"
}
rm "$w/own-check/report.html"
expect_refusal "report without --force over its own summary.md" "exists. HINT: --force" -- "$amp" report "$w/own-check"
"$amp" report "$w/own-check" --force > /dev/null
replaced "report" "$w/own-check/report.html" -- "$amp" report "$w/own-check" --force
replaced "check" "$w/own-check" -- "$amp" check "$sc" --jobs 1 --references "$w/refs" --out "$w/own-check" --force
replaced "check --jobs 2" "$w/own-check" -- \
  "$amp" check "$sc" "$sc2" --jobs 2 --references "$w/refs" --out "$w/own-check" --force
replaced "run" "$w/rec" -- "$amp" run "$sc" --out "$w/rec" --force
"$amp" judge "$w/rec/tiny-mlp.h5" --reference "$w/R.h5" --out "$w/own-judge" > /dev/null || true
replaced "judge" "$w/own-judge" -- "$amp" judge "$w/rec/tiny-mlp.h5" --reference "$w/R.h5" --out "$w/own-judge" --force
"$amp" validate "$sc" --references "$w/gold" --out "$w/own-validate" > /dev/null || true
replaced "validate" "$w/own-validate" -- "$amp" validate "$sc" --references "$w/gold" --out "$w/own-validate" --force
replaced "reference" "$w/R.h5" -- \
  "$amp" reference "$w/rec/tiny-mlp.h5" --spread "seed:$seed_run" --out "$w/R.h5" --force
replaced "record" "$ref_file" -- "$amp" record "$sc" --references "$w/refs" --force
replaced "validate --record" "$golden" -- "$amp" validate "$sc" --record --references "$w/gold" --force
mkdir "$w/marker-only" && cp "$w/own-check/.ampcheck-run" "$w/marker-only/"
"$amp" run "$sc" --out "$w/marker-only" > /dev/null || fail "run into a directory holding only the marker"
echo "ok: a directory holding only ampcheck's marker is written without --force"

# --- names and a dangling --out, before training ---------------------------------------------------------------------
ln -s "$w/does-not-exist" "$w/dangling"
expect_refusal "run --out a dangling symlink" "which does not exist" -- "$amp" run "$sc" --out "$w/dangling"
expect_refusal "check --out a dangling symlink" "which does not exist" -- \
  "$amp" check "$sc" --jobs 1 --references "$w/refs" --out "$w/dangling"
[ ! -e "$w/does-not-exist" ] || fail "the dangling link's target was created"
scenario "$w/dup.yaml" tiny-mlp
expect_refusal "two scenarios named tiny-mlp" "$w/dup.yaml" -- "$amp" run "$sc" "$w/dup.yaml" --out "$w/dup-out"
grep -q "$sc and $w/dup.yaml both name" "$w/log" || fail "the duplicate's message names not both files"
expect_refusal "check --jobs 2 of two scenarios named tiny-mlp" "both name their scenario" -- \
  "$amp" check "$sc" "$w/dup.yaml" --jobs 2 --references "$w/refs" --out "$w/dup-out"
expect_refusal "validate --record of two scenarios named tiny-mlp" "both name their scenario" -- \
  "$amp" validate "$sc" "$w/dup.yaml" --record --references "$w/dup-gold"
[ ! -e "$w/dup-out" ] && [ ! -e "$w/dup-gold" ] || fail "a refused run wrote its directory"
long=$(printf 'n%.0s' $(seq 300)); scenario "$w/long.yaml" "$long"
expect_refusal "a 300-byte name" "longer than the limit of 128" -- "$amp" run "$w/long.yaml" --out "$w/long-out"
edge=$(printf 'e%.0s' $(seq 128)); scenario "$w/edge.yaml" "$edge"
"$amp" run "$w/edge.yaml" --out "$w/edge-out" > /dev/null || fail "a 128-byte name"
[ -f "$w/edge-out/$edge.h5" ] || fail "a 128-byte name: no $edge.h5"
echo "ok: a 128-byte name is written"
echo "PASS: $refused refusals, nothing of the user's changed; ampcheck's own outputs replaced"
