#!/usr/bin/env bash
# Installs ampcheck_amp from the build tree into a temporary prefix and builds + runs harness/amp/example against
# it through find_package(ampcheck_amp): proves the GradScaler library is usable from any LibTorch program.
set -euo pipefail
build_dir=$1; src_dir=$2; python=$3
prefix=$(mktemp -d); work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build_dir" --component Unspecified --prefix "$prefix" > /dev/null
# torch.utils.cmake_prefix_path, found without importing torch (seconds): <the torch package>/share/cmake
torch_prefix=$("$python" -c 'import importlib.util, os
print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "share", "cmake"))')
[ -f "$torch_prefix/Torch/TorchConfig.cmake" ] || { echo "FAIL: no TorchConfig.cmake under $torch_prefix"; exit 1; }
cmake -S "$src_dir/harness/amp/example" -B "$work" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work" -j 2 > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/gradscaler_example"
