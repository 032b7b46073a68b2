"""The recorder's earlier home (a file to put on PYTHONPATH): `import ampcheck_recorder` still works and gives the
package's recorder, `ampcheck.recorder` (python/src/ampcheck/; `pip install ./python`)."""

from ampcheck.recorder import *  # noqa: F401,F403
from ampcheck.recorder import Recorder, nudge_ulp  # noqa: F401
