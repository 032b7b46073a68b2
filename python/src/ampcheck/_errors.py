"""The package's error type, defined in Python so that it exists whether or not the native core (ampcheck._native)
is there: the extension raises it for every error of ampcheck's use cases."""

from __future__ import annotations


class AmpcheckError(Exception):
    """Bad input to ampcheck.judge / make_reference / validate, or a native core that cannot be loaded. The message is
    the one the `ampcheck` command prints before exiting 2: it names the file, the field and what was expected, and
    a HINT where there is one."""
