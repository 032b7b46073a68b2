"""The `ampcheck` console command of the Python package: runs ampcheck's C++ command-line tool (judge, reference,
check, validate, ...), which it finds as, in order,

  1. $AMPCHECK_BIN;
  2. the build of the checkout the package is imported from (<source>/build/ampcheck: an editable install, or
     PYTHONPATH=<source>/python/src);
  3. another `ampcheck` executable on PATH (not this script).

The tool is built once from the repository (`bash ci/build.sh`: LibTorch comes from the torch wheel already installed,
nothing else is downloaded); `pip install ./python` then makes `ampcheck judge ...` work from any directory.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_this_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(2048)
    except OSError:
        return False
    return head.startswith(b"#!") and b"ampcheck.cli" in head


def candidates() -> List[str]:
    out = []
    if os.environ.get("AMPCHECK_BIN"):
        out.append(os.environ["AMPCHECK_BIN"])
    src = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # imported from <source>/python/src/ampcheck
    out.append(os.path.join(src, os.environ.get("BUILD_DIR", "build"), "ampcheck"))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, "ampcheck")
        if os.path.isfile(p) and os.access(p, os.X_OK) and not _is_this_script(p):
            out.append(p)
    return out


def find_binary() -> Optional[str]:
    for p in candidates():
        if os.path.isfile(p) and os.access(p, os.X_OK) and not _is_this_script(p):
            return p
    return None


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    binary = find_binary()
    if binary is None:
        print("ampcheck: the command-line tool is not built or not found (looked at: "
              + ", ".join(candidates() or ["$AMPCHECK_BIN unset, nothing on PATH"]) + "). HINT: build it in the "
              "ampcheck source tree with `bash ci/build.sh` (LibTorch from the installed torch wheel), then set "
              "AMPCHECK_BIN=<source>/build/ampcheck or put it on PATH", file=sys.stderr)
        return 2
    os.execv(binary, [binary] + list(argv))
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
