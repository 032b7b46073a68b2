#!/usr/bin/env bash
# ci/gpu.sh fails closed. Every GPU result the project commits comes through it, so a stage that fails must stop the
# script with a non-zero exit and a line naming the stage, after packing what that stage produced. The GPU itself is
# not involved here: stand-ins for nvidia-smi and the ampcheck binary (put first on PATH / in BUILD_DIR) exit with
# the status each case needs, which is all the script's control flow looks at.
# usage: gpu_script.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
bin="$tmp/bin"; mkdir -p "$bin" "$tmp/build/harness/tests"
smi() { printf '#!/bin/sh\n%s\n' "$1" > "$bin/nvidia-smi"; chmod +x "$bin/nvidia-smi"; }
# the ampcheck stand-in notes each call in $tmp/calls, then runs the case's body
amp() { printf '#!/bin/sh\necho "$*" >> "%s/calls"\n%s\n' "$tmp" "$1" > "$tmp/build/ampcheck"; chmod +x "$tmp/build/ampcheck"; }
# expect RC_WANTED PATTERN -- env assignments for one run of ci/gpu.sh
expect() {
  local want=$1 pattern=$2; shift 3
  rm -rf "$tmp/out"
  env PATH="$bin:$PATH" OUT="$tmp/out" WORK="$tmp/work" BUILD_DIR="$tmp/build" "$@" bash "$src/ci/gpu.sh" > "$tmp/log" 2>&1
  local rc=$?
  if [ "$want" = nonzero ] && [ $rc -eq 0 ] || [ "$want" = 0 ] && [ $rc -ne 0 ] || ! grep -qE "$pattern" "$tmp/log"; then
    echo "FAIL: $* -> exit $rc (wanted $want, output matching '$pattern'):"; sed 's/^/    /' "$tmp/log"; fails=$((fails + 1))
  else
    echo "ok: $* -> exit $rc: $(grep -E "$pattern" "$tmp/log" | head -1)"
  fi
}
smi 'echo "GPU 0: stand-in"'
expect nonzero "stage 'setup' failed: unknown stage 'bogus'" -- STAGES="doctor bogus"
smi 'exit 9'
expect nonzero "stage 'setup' failed: nvidia-smi: no GPU visible" -- STAGES="doctor"
smi 'echo "GPU 0: stand-in"'
amp 'exit 4'
expect nonzero "stage 'doctor' failed: ampcheck doctor \(exit 4\)" -- STAGES="doctor"
# a failing suite check stops the script after its run directory is packed, and no later stage runs
rm -f "$tmp/calls"
amp 'case "$1" in check) mkdir -p "$(echo "$@" | sed "s/.*--out \([^ ]*\).*/\1/")"; exit 1;; *) exit 0;; esac'
expect nonzero "stage 'fastsuite' failed: ampcheck check --suite gpu --engine fast \(exit 1\)" -- STAGES="fastsuite doctor"
[ -f "$tmp/out/fast.tar.gz" ] || { echo "FAIL: the failed stage's results were not packed"; fails=$((fails + 1)); }
grep -q "^doctor" "$tmp/calls" && { echo "FAIL: a stage after the failed one ran: $(cat "$tmp/calls")"; fails=$((fails + 1)); }
amp 'echo "doctor: stand-in"; exit 0'
expect 0 "every stage passed \(doctor\)" -- STAGES="doctor"
[ $fails -eq 0 ] && echo "PASS: ci/gpu.sh stops at the first failed stage" || exit 1
