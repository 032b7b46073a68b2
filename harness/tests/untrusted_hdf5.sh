#!/usr/bin/env bash
# Untrusted HDF5 contained (issue "never crash on what users hand it"): trajectory files from a mutation fuzz of
# `ampcheck judge` (scenarios/fuzz/judge_fuzz.py) on which Debian 12's libhdf5 1.10 crashes (SIGSEGV in its
# variable-length attribute conversion) or loops; read in a forked child (trajectory::read_trajectory_contained), each
# must end `judge` and `reference` with exit 2 and a line naming the file — as a run and as the reference.
# Usage: untrusted_hdf5.sh AMPCHECK SOURCE_DIR
set -uo pipefail
amp=$1; src=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export AMPCHECK_READ_TIMEOUT_S=2  # the looping file ends after 2 s
ref=$(ls "$src"/references/cpu/*.h5 | head -1)
fails=0
for f in "$src"/harness/tests/data/corrupt-hdf5/*.h5; do
  for how in run reference spread; do
    case $how in
      run) "$amp" judge "$f" --reference "$ref" --out "$work/o" --force > "$work/log" 2>&1 ;;
      reference) "$amp" judge "$f" --reference "$f" --out "$work/o" --force > "$work/log" 2>&1 ;;
      spread) "$amp" reference "$f" --spread "seed:$f" --out "$work/r.h5" --force > "$work/log" 2>&1 ;;
    esac
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q "$(basename "$f")" "$work/log"; then
      echo "FAIL: $(basename "$f") as $how: exit $rc"; cat "$work/log"; fails=$((fails + 1))
    else
      echo "ok: $(basename "$f") as $how: exit 2: $(grep -o "$(basename "$f"):.*" "$work/log" | head -1 | cut -c1-140)"
    fi
  done
done
[ -e "$work/o/summary.json" ] && { echo "FAIL: a run directory was written"; fails=$((fails + 1)); }
exit $fails
