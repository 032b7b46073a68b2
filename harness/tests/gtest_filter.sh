#!/usr/bin/env bash
# One CTest entry of a GoogleTest binary: runs EXE with --gtest_filter=FILTER; exit 77 (CTest's skip) only when every
# test it selected skipped itself (none passed, none failed) — a skipped test beside passing or failing ones does not
# turn the entry into "Skipped" and so cannot hide a failure. Usage: gtest_filter.sh EXE FILTER
set -uo pipefail
out=$(mktemp); trap 'rm -f "$out"' EXIT
"$1" --gtest_filter="$2" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && grep -q '^\[  PASSED  \] 0 tests' "$out" && grep -q '^\[  SKIPPED \] [1-9]' "$out"; then
  exit 77
fi
exit "$rc"
