#!/usr/bin/env bash
# Every gtest suite of a test binary is run by some CTest entry: each suite's name must match one of the gtest
# filters given (the FILTERs of ampcheck_add_test in harness/tests/CMakeLists.txt), else the suite would build and
# never run in CI. Usage: check_filters.sh <test binary> <filter>...
set -euo pipefail
exe=$1
shift
missing=0
for suite in $("$exe" --gtest_list_tests | grep -v '^ ' | grep '\.$' | sed 's/\.$//'); do
  covered=0
  for filter in "$@"; do
    IFS=':' read -ra patterns <<< "$filter"
    for p in "${patterns[@]}"; do
      # shellcheck disable=SC2053  # (a glob on purpose)
      [[ "$suite" == $p ]] && covered=1
    done
  done
  [ "$covered" = 1 ] || { echo "FAIL: suite $suite of $(basename "$exe") is run by no CTest entry (harness/tests/CMakeLists.txt)"; missing=1; }
done
[ "$missing" = 0 ] && echo "every suite of $(basename "$exe") is run by a CTest entry"
exit "$missing"
