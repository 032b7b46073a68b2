"""Finds and loads ampcheck's native core, the extension module `ampcheck._native` (harness/python/native_module.cpp),
once, on the first in-process call (ampcheck.judge, ...) — `import ampcheck` never needs it. Looked for, in order:

  1. inside the installed package (`pip install ./python` compiles it and puts it there);
  2. the build of the source checkout this package is imported from (<source>/$BUILD_DIR or build, python/ampcheck/:
     `bash ci/build.sh` builds it there; PYTHONPATH=<source>/python/src).
"""

from __future__ import annotations

import glob
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

from ampcheck._errors import AmpcheckError

_HERE = os.path.dirname(os.path.abspath(__file__))
_native: ModuleType | None = None


def checkout_build_dir() -> str | None:
    """<source>/build (or $BUILD_DIR) when this package is imported from a source checkout (<source>/python/src/
    ampcheck, beside <source>/CMakeLists.txt), else None (an installed package)."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    if os.path.basename(os.path.dirname(_HERE)) != "src" or not os.path.isfile(os.path.join(source, "CMakeLists.txt")):
        return None
    return os.path.join(source, os.environ.get("BUILD_DIR", "build"))


def _checkout_candidates() -> list[str]:
    build = checkout_build_dir()
    if build is None:
        return []
    d = os.path.join(build, "python", "ampcheck")
    return sorted(
        p for suffix in importlib.machinery.EXTENSION_SUFFIXES for p in glob.glob(os.path.join(d, "_native" + suffix))
    )


def places_looked() -> list[str]:
    """Where the native core was looked for, in words (for an error that says so)."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    out = [f"in the installed package: {os.path.join(_HERE, '_native' + suffix)}"]
    build = checkout_build_dir()
    if build is not None:
        out.append(f"in the source checkout's build: {os.path.join(build, 'python', 'ampcheck', '_native' + suffix)}")
    return out


def native() -> ModuleType:
    """The loaded ampcheck._native, or AmpcheckError saying where it was looked for and what to do."""
    global _native
    if _native is not None:
        return _native
    import torch  # noqa: F401  (loads LibTorch's libraries, which the extension links, the way torch loads them)

    errors: list[str] = []
    try:
        _native = _safe(importlib.import_module("ampcheck._native"))
        return _native
    except ImportError as e:
        if getattr(e, "name", None) != "ampcheck._native":
            errors.append(f"the installed package's: {e}")
    for path in _checkout_candidates():
        try:
            spec = importlib.util.spec_from_file_location("ampcheck._native", path)
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules["ampcheck._native"] = module
            spec.loader.exec_module(module)
            _native = _safe(module)
            return module
        except ImportError as e:
            sys.modules.pop("ampcheck._native", None)
            errors.append(f"{path}: {e}")
    raise AmpcheckError(
        "ampcheck's native core (the extension module ampcheck._native, which judges in this process) was not found. "
        "Looked "
        + "; ".join(places_looked())
        + "."
        + (" It failed to load: " + "; ".join(errors) if errors else "")
        + " HINT: install the package so that it compiles its native core — `pip install --no-build-isolation "
        "./python` in the ampcheck checkout (needs CMake, a C++17 compiler and the libraries ci/setup.sh installs) — "
        "or, in a checkout, build it with `bash ci/build.sh`"
    )


def _safe(module: ModuleType) -> ModuleType:
    """The module, unless it carries a private copy of the C++ runtime (libstdc++ linked into it): then its judge
    would crash this process (issue 51: SIGSEGV in `ostream << double` on the H100 machine, GCC 13) or print numbers
    as nothing (GCC 12) — AmpcheckError, and the live guard judges through the `ampcheck` command instead."""
    check = getattr(module, "private_cxx_runtime", None)
    found = check() if check is not None else ""
    if found:
        sys.modules.pop("ampcheck._native", None)
        raise AmpcheckError(
            f"{getattr(module, '__file__', 'ampcheck._native')}: the native core carries its own copy of the C++ "
            f"runtime (libstdc++'s {found} are defined inside it): loaded beside torch's libstdc++ it would crash "
            f"this process. HINT: rebuild it (`bash ci/build.sh`, or pip install --no-build-isolation ./python) "
            f"without -static-libstdc++ in LDFLAGS / CMAKE_*_LINKER_FLAGS; the `ampcheck` command is not affected"
        )
    return module


def native_available() -> bool:
    """Whether the native core loads (ampcheck.judge etc. work in this process)."""
    try:
        native()
        return True
    except AmpcheckError:
        return False
