"""ampcheck for PyTorch users: record a training run in ampcheck's trajectory format and judge it against an FP32
reference — in this process (`ampcheck.judge`, `ampcheck.make_reference`, `ampcheck.validate`: the C++ core the
package compiles, ampcheck._native) or with the `ampcheck` command (docs/TRAJECTORY_FORMAT.md, python/README.md).

    import ampcheck
    ampcheck.preflight(model, optimizer, scaler=scaler, mixed_precision="fp16")   # what will go wrong, before step 0
    with ampcheck.Recorder("runs/fp16.h5", model, optimizer, scaler) as rec:
        for step in range(steps):
            ...
            rec.step(loss)
    verdict = ampcheck.judge("runs/fp16.h5", "ref.h5")   # ref.h5: ampcheck.make_reference(fp32 run, spread=[...])

Integrations: `ampcheck.integrations.hf.AmpcheckCallback` (Hugging Face Trainer), `.lightning`, `.accelerate`.
Under `ampcheck sweep` (AMPCHECK_PLAN set) the Recorder and the integrations apply the sweep's plan themselves
(`ampcheck.current_plan()`; docs/USING.md, "The sweep's environment contract").
"""

import sys
import types
from typing import TYPE_CHECKING, Any

from ampcheck._version import __version__

# The names below are loaded when first used (PEP 562), so that `import ampcheck` — and the `ampcheck` console
# command, which only starts the C++ tool — does not import torch (about 2 s) until something that needs it is used.
# For type checkers and readers, the same imports spelled out:
if TYPE_CHECKING:
    from ampcheck.api import (
        VERDICTS,
        AmpcheckError,
        Judgement,
        JudgementWarning,
        Reference,
        ReferenceInfo,
        SignalComparison,
        SuiteResult,
        judge,
        load_reference,
        make_reference,
        native_available,
        validate,
    )
    from ampcheck.guard import GuardJudgement, GuardStop
    from ampcheck.keep import keep_fp32
    from ampcheck.noise import nudge_ulps, seed_everything
    from ampcheck.plan import Plan, PlanError, current_plan
    from ampcheck.preflight import PreflightFinding, preflight
    from ampcheck.recorder import COLUMNS, FORMAT, FORMAT_VERSION, PERTURBATIONS, Recorder, RecorderOptions, nudge_ulp

_LAZY = {
    "api": (
        "VERDICTS",
        "AmpcheckError",
        "Judgement",
        "JudgementWarning",
        "Reference",
        "ReferenceInfo",
        "SignalComparison",
        "SuiteResult",
        "judge",
        "load_reference",
        "make_reference",
        "native_available",
        "validate",
    ),
    "guard": ("GuardJudgement", "GuardStop"),
    "keep": ("keep_fp32",),
    "noise": ("nudge_ulps", "seed_everything"),
    "plan": ("Plan", "PlanError", "current_plan"),
    "preflight": ("PreflightFinding", "preflight"),
    "recorder": ("COLUMNS", "FORMAT", "FORMAT_VERSION", "PERTURBATIONS", "Recorder", "RecorderOptions", "nudge_ulp"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    import importlib
    import importlib.util

    module = _WHERE.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"ampcheck.{module}"), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"ampcheck.{name}") is not None:
        value = importlib.import_module(f"ampcheck.{name}")  # a submodule, as `ampcheck.recorder` was before
    else:
        raise AttributeError(f"module 'ampcheck' has no attribute {name!r}")
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


class _Package(types.ModuleType):
    """`import ampcheck.preflight` binds the submodule to the package's attribute of the same name; the package's
    `preflight` stays the function, as it was when this file imported it eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "preflight" and isinstance(value, types.ModuleType):
            value = value.preflight
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "Recorder",
    "RecorderOptions",
    "keep_fp32",
    "nudge_ulp",
    "nudge_ulps",
    "seed_everything",
    "preflight",
    "PreflightFinding",
    "COLUMNS",
    "FORMAT",
    "FORMAT_VERSION",
    "PERTURBATIONS",
    "Plan",
    "PlanError",
    "current_plan",
    "__version__",
    "judge",
    "load_reference",
    "make_reference",
    "validate",
    "native_available",
    "Judgement",
    "JudgementWarning",
    "SignalComparison",
    "Reference",
    "ReferenceInfo",
    "SuiteResult",
    "AmpcheckError",
    "VERDICTS",
    "GuardStop",
    "GuardJudgement",
]
