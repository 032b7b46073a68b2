#!/usr/bin/env bash
# A run directory that would be refused is refused before any training: `check`, `run` and `validate` into a --out
# that holds an earlier run's files exit 2 at once, naming the first file, and touch nothing there; with --force they
# run. Usage: refuse_before_training.sh AMPCHECK SOURCE_DIR
set -uo pipefail
amp=$1; src=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sc=$src/scenarios/fp32.yaml
"$amp" check "$sc" --device cpu --jobs 1 --out "$work/o" > /dev/null 2>&1 || fail "the first check"
before=$(cd "$work/o" && ls -l --time-style=+%s.%N | md5sum)
for cmd in check run validate; do
  args=("$sc" --device cpu --out "$work/o"); [ $cmd = check ] && args+=(--jobs 1)
  [ $cmd = validate ] && args=("$src/scenarios/validate/fp32-gpt.yaml" --device cpu --out "$work/o")
  start=$(date +%s.%N)
  rc=0; "$amp" $cmd "${args[@]}" > "$work/$cmd.log" 2>&1 || rc=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  [ $rc -eq 2 ] || { cat "$work/$cmd.log"; fail "$cmd into a used --out: exit $rc (wanted 2)"; }
  grep -q "exists; refusing to overwrite" "$work/$cmd.log" || fail "$cmd: no refusal named"
  grep -q "\[1/" "$work/$cmd.log" && fail "$cmd trained before refusing"
  echo "ok: $cmd into a used --out: exit 2 in ${took}s: $(grep -o 'ampcheck: .*' "$work/$cmd.log" | head -1 | cut -c1-120)"
done
after=$(cd "$work/o" && ls -l --time-style=+%s.%N | md5sum)
[ "$before" = "$after" ] || fail "the run directory changed"
"$amp" check "$sc" --device cpu --jobs 1 --out "$work/o" --force > /dev/null 2>&1 || fail "check --force"
echo "refused before training; --force replaces"
