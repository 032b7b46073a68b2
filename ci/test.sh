#!/usr/bin/env bash
# The test command: installs what is missing (ci/setup.sh), builds, and runs every CTest test (labels unit, cpu,
# gpu; gpu tests skip themselves where there is no GPU) plus the `ci` suite through the CLI, and report.html in
# headless Chromium; then the sanitizer slice (ci/sanitize.sh: the unit tests and a cpu slice under ASan + UBSan, the
# fuzz smoke). SANITIZE=0 leaves the slice out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh --with-browser --with-python-tests --with-sanitizers
bash ci/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2
if [ "${SANITIZE:-1}" != 0 ]; then
  bash ci/sanitize.sh
fi
