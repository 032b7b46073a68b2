"""The package's version, kept in one place: the top CMakeLists.txt's `project(ampcheck VERSION x.y.z)`. The wheel's
metadata takes it from there (pyproject.toml: scikit-build-core's regex provider); here it is read back from the
installed metadata, or, in a source checkout (PYTHONPATH=<source>/python/src), from that CMakeLists.txt."""

from __future__ import annotations

import os
import re


def _version() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    cmake = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(here))), "CMakeLists.txt")
    if os.path.isfile(cmake):  # a source checkout: python/src/ampcheck
        with open(cmake, encoding="utf-8") as f:
            m = re.search(r"project\(ampcheck VERSION ([0-9][0-9.]*)", f.read())
        if m:
            return m.group(1)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ampcheck")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
