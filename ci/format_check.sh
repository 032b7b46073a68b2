#!/usr/bin/env bash
# Checks that the C++ under harness/ (*.h, *.cpp, *.cu, *.cuh; the fuzz corpora aside) is formatted as .clang-format
# says: `clang-format --dry-run -Werror` on each file; names every file that is not and exits 1.
# usage: ci/format_check.sh [--fix]   (--fix: reformat those files in place instead)
# The reference formatter is Debian 12's clang-format 14 (ci/setup.sh installs it); another major version may
# format a few constructs differently (CLANG_FORMAT=clang-format-14 picks a binary).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: ci/format_check.sh [--fix]" >&2; exit 2 ;;
esac
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || {
  echo "FAIL: $cf not found. HINT: apt-get install clang-format (ci/setup.sh installs it)" >&2; exit 2; }
[ -f .clang-format ] || { echo "FAIL: .clang-format missing at the repository root" >&2; exit 2; }
version=$("$cf" --version | sed -nE 's/.*version ([0-9]+)\..*/\1/p')
[ "$version" = 14 ] || echo "note: $cf is version ${version:-unknown}; the style is checked with clang-format 14"

mapfile -t files < <(find harness \( -name corpus -o -name regressions \) -prune -o -type f \
                       \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || { echo "FAIL: no C++ files under harness/" >&2; exit 2; }

bad=()
for f in "${files[@]}"; do
  "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" = 0 ]; then
  echo "format: ${#files[@]} files under harness/ follow .clang-format"
  exit 0
fi
if [ "$fix" = 1 ]; then
  "$cf" --style=file -i "${bad[@]}"
  printf 'reformatted: %s\n' "${bad[@]}"
  exit 0
fi
printf 'FAIL: not formatted: %s\n' "${bad[@]}"
echo "FAIL: ${#bad[@]} of ${#files[@]} files differ from .clang-format. HINT: bash ci/format_check.sh --fix (or" \
     "clang-format -i FILE), then review the diff; '$cf --dry-run FILE' shows where"
exit 1
