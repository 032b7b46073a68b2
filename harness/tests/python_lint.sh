#!/usr/bin/env bash
# The Python package's types and lint: `mypy --strict` over python/src (pyproject.toml [tool.mypy]) and `ruff check`
# over python/ ([tool.ruff]), both at the versions the package's test extra pins (ci/setup.sh --with-python-tests
# installs them). Fails closed: a missing tool is a failure, with a HINT. Usage: python_lint.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1; py=$2
for tool in mypy ruff; do
  "$py" -m "$tool" --version > /dev/null 2>&1 || {
    echo "FAIL: $tool is not installed for $py. HINT: bash ci/setup.sh --with-python-tests (pins it)"; exit 1; }
done
cd "$src/python"
"$py" -m mypy --config-file pyproject.toml
"$py" -m ruff check --config pyproject.toml .
echo "python_lint: mypy --strict and ruff clean"
