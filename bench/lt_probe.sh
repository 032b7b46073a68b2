#!/usr/bin/env bash
# Builds bench/lt_probe.cu against the cuBLASLt that LibTorch loads (the torch wheel's) and runs it; output on stdout.
# Usage: bash bench/lt_probe.sh [N H C2 reps]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
[ -x /opt/torch/.venv/bin/python ] && py=/opt/torch/.venv/bin/python
lt=$("$py" -c 'import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
c = sorted(glob.glob(site + "/nvidia/cu*/lib/libcublasLt.so*") + glob.glob(site + "/nvidia/cublas/lib/libcublasLt.so*"))
print(c[0] if c else "")')
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=${TMPDIR:-/tmp}/ampcheck_lt_probe
if [ -n "$lt" ]; then
  "$nvcc" -O2 -arch=sm_90 -o "$out" "$here/lt_probe.cu" -L"$(dirname "$lt")" -l:"$(basename "$lt")" \
    -Xlinker -rpath -Xlinker "$(dirname "$lt")"
else
  "$nvcc" -O2 -arch=sm_90 -o "$out" "$here/lt_probe.cu" -lcublasLt
fi
echo "cuBLASLt: ${lt:-from the CUDA toolkit}"
"$out" "$@"
