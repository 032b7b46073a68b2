#!/usr/bin/env bash
# Installs everything ampcheck needs on a fresh Debian 12 machine (CPU): compilers and CMake, the C++ libraries
# from Debian, and LibTorch through the Python package torch (same version as the GPU machine).
# Idempotent: each step checks before it installs. Run as root (or with sudo available).
# --with-browser also installs Debian's chromium, which the test of report.html (cpu.report_browser) drives headless;
# --with-python-tests the Python package's pinned test dependencies (python/pyproject.toml [test]: pytest and the real
# transformers / accelerate / lightning the integrations are tested against), wheel and scikit-build-core (the package's
# build backend: `pip install --no-build-isolation ./python` compiles the C++ core without a download); --with-sanitizers Debian's clang and its sanitizer / libFuzzer runtimes (the `sanitize` and `tsan`
# presets of CMakePresets.json).
set -euo pipefail

TORCH_VERSION=2.11.0
DEB_PACKAGES=(build-essential cmake ninja-build pkg-config git clang-format
  libhdf5-dev libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libgloo-dev
  python3-pip python3-dev)  # python3-dev: Python.h for the extension module ampcheck._native
WITH_PY_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --with-browser) DEB_PACKAGES+=(chromium) ;;
    --with-python-tests) WITH_PY_TESTS=1 ;;
    --with-sanitizers) DEB_PACKAGES+=(clang libclang-rt-14-dev) ;;
    *) echo "ci/setup.sh: unknown option '$arg' (known: --with-browser --with-python-tests --with-sanitizers)" >&2; exit 2 ;;
  esac
done
PY_TEST_PACKAGES=(pytest==9.2.0 transformers==5.25.0 accelerate==1.16.0 lightning==2.6.6 wheel==0.45.1
  scikit-build-core==1.1.2 mypy==2.4.1 ruff==0.17.5)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] Debian packages present"
fi

PY=${PYTHON:-python3}
have=$($PY -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
# Debian's own python3 refuses system-wide pip installs (PEP 668); a pyenv/venv python does not need the flag.
extra=()
if $PY -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && \
   [ -e "$($PY -c 'import sysconfig;print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
  extra+=(--break-system-packages)
fi
if [ "$have" != "$TORCH_VERSION" ]; then
  echo "[setup] pip install torch==$TORCH_VERSION (LibTorch comes with it)"
  $PY -m pip install -q "${extra[@]}" "torch==$TORCH_VERSION" numpy h5py pyyaml
else
  echo "[setup] torch $have present"
fi
# h5py: the recorder, the tests' HDF5 checks; pyyaml: scenarios/sensitivity/generate.py, the CI recipe's test
$PY -c 'import numpy, h5py, yaml' 2>/dev/null || $PY -m pip install -q "${extra[@]}" numpy h5py pyyaml
if [ "$WITH_PY_TESTS" = 1 ]; then
  if ! $PY -c 'import pytest, transformers, accelerate, lightning, wheel, scikit_build_core, mypy, ruff, sys
from importlib.metadata import version as v
have = tuple(v(p) for p in ("pytest", "transformers", "accelerate", "lightning", "wheel", "scikit-build-core", "mypy",
                            "ruff"))
sys.exit(0 if have == ("9.2.0", "5.25.0", "1.16.0", "2.6.6", "0.45.1", "1.1.2", "2.4.1", "0.17.5") else 1)' 2>/dev/null; then
    echo "[setup] pip install ${PY_TEST_PACKAGES[*]}"
    $PY -m pip install -q "${extra[@]}" "${PY_TEST_PACKAGES[@]}"
  else
    echo "[setup] Python test packages present"
  fi
fi
echo "[setup] done: torch $($PY -c 'import torch; print(torch.__version__)') at $($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
