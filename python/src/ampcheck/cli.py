"""The `ampcheck` console command of the Python package: runs ampcheck's C++ command-line tool (judge, reference,
check, validate, sweep, ...), which it finds as, in order,

  1. $AMPCHECK_BIN, when set;
  2. the tool installed with this package (ampcheck/bin/ampcheck: `pip install ./python` compiles it);
  3. the build of the source checkout the package is imported from (<source>/build/ampcheck: an editable install, or
     PYTHONPATH=<source>/python/src);
  4. another `ampcheck` executable on PATH (not this script).
"""

from __future__ import annotations

import os
import sys

from ampcheck._loader import checkout_build_dir

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_this_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(2048)
    except OSError:
        return False
    return head.startswith(b"#!") and b"ampcheck.cli" in head


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK) and not _is_this_script(path)


def places() -> list[tuple[str, str | None]]:
    """Where the tool is looked for, in order: (what the place is, in words; the path there, or None)."""
    out: list[tuple[str, str | None]] = [
        ("$AMPCHECK_BIN", os.environ.get("AMPCHECK_BIN") or None),
        ("the tool installed with this package", os.path.join(_HERE, "bin", "ampcheck")),
    ]
    build = checkout_build_dir()
    if build:
        out.append(("the build of the source checkout", os.path.join(build, "ampcheck")))
    on_path = None
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, "ampcheck")
        if d and _runnable(p):
            on_path = p
            break
    out.append(("an `ampcheck` executable on PATH", on_path))
    return out


def candidates() -> list[str]:
    return [p for _, p in places() if p]


def find_binary() -> str | None:
    for p in candidates():
        if _runnable(p):
            return p
    return None


def not_found_message() -> str:
    lines = ["ampcheck: the ampcheck command-line tool (the C++ program this command runs) was not found. Looked for:"]
    for i, (what, path) in enumerate(places(), 1):
        if what == "$AMPCHECK_BIN":
            state = f"{path} — not an executable file" if path else "not set"
        elif what.startswith("an `ampcheck`"):
            state = "none (only this Python command)"
        else:
            state = f"{path} — not there"
        lines.append(f"  {i}. {what}: {state}")
    lines.append(
        "HINT: this package was installed without its native core. Reinstall it from the ampcheck checkout "
        "with `pip install --no-build-isolation ./python` (it compiles the tool; needs CMake, a C++17 "
        "compiler and the libraries ci/setup.sh installs), or build the checkout with `bash ci/build.sh`, "
        "or point AMPCHECK_BIN at an ampcheck executable."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    binary = find_binary()
    if binary is None:
        print(not_found_message(), file=sys.stderr)
        return 2
    os.execv(binary, [binary] + list(argv))
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
