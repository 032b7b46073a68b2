#!/usr/bin/env bash
# The Python package's types and lint: `mypy --strict` over python/src (pyproject.toml [tool.mypy]), `ruff check` and
# `ruff format --check` over python/ ([tool.ruff]), at exactly the versions the package's test extra pins
# (ci/setup.sh --with-python-tests installs them). Fails closed: a missing tool or another version is a failure, with a
# HINT. CACHE_DIR (optional; CTest gives one in the build tree) holds mypy's and ruff's caches, so that nothing is
# written into the source tree: a cold mypy run reads the hints of torch, transformers and lightning (~10 s: the
# modules the package's code cannot reach — transformers' 2,300 models, torch's compiler stack — are skipped,
# pyproject.toml says which), a warm one a few seconds.
# Usage: python_lint.sh SOURCE_DIR PYTHON [CACHE_DIR]
set -euo pipefail
src=$1; py=$2; cache=${3:-}
project="$src/python/pyproject.toml"
for tool in mypy ruff; do
  pin=$(grep -o "\"$tool==[0-9.]*\"" "$project" | head -1 | tr -d '"' | cut -d= -f3)
  [ -n "$pin" ] || { echo "FAIL: no $tool==VERSION pin in $project's test extra"; exit 1; }
  have=$("$py" -m "$tool" --version 2>/dev/null | awk '{print $2}') || have=""
  if [ -z "$have" ]; then
    echo "FAIL: $tool is not installed for $py. HINT: bash ci/setup.sh --with-python-tests (installs $tool==$pin)"; exit 1
  fi
  if [ "$have" != "$pin" ]; then
    echo "FAIL: $tool $have is installed for $py; python/pyproject.toml pins $pin (another version checks other" \
         "rules). HINT: $py -m pip install $tool==$pin"; exit 1
  fi
done
mypy_cache=(); ruff_cache=()
if [ -n "$cache" ]; then
  mkdir -p "$cache"
  mypy_cache=(--cache-dir "$cache/mypy"); ruff_cache=(--cache-dir "$cache/ruff")
fi
cd "$src/python"
"$py" -m mypy --config-file pyproject.toml "${mypy_cache[@]}"
"$py" -m ruff check --config pyproject.toml "${ruff_cache[@]}" .
"$py" -m ruff format --check --config pyproject.toml "${ruff_cache[@]}" .
echo "python_lint: mypy --strict, ruff check and ruff format --check clean"
