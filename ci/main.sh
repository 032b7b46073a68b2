#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs `ampcheck` on its default suite — `gpu` on the GPU
# when there is one, else `ci` on the CPU — writing reports/latest/ and ending with the result table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
exec "./${BUILD_DIR:-build}/ampcheck" "$@"
