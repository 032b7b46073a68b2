"""ampcheck for PyTorch users: record a training run in ampcheck's trajectory format and judge it against an FP32
reference with the `ampcheck` command (docs/TRAJECTORY_FORMAT.md, python/README.md).

    import ampcheck
    ampcheck.preflight(model, optimizer, scaler=scaler, mixed_precision="fp16")   # what will go wrong, before step 0
    with ampcheck.Recorder("runs/fp16.h5", model, optimizer, scaler) as rec:
        for step in range(steps):
            ...
            rec.step(loss)

Integrations: `ampcheck.integrations.hf.AmpcheckCallback` (Hugging Face Trainer), `.lightning`, `.accelerate`.
Under `ampcheck sweep` (AMPCHECK_PLAN set) the Recorder and the integrations apply the sweep's plan themselves
(`ampcheck.current_plan()`; docs/USING.md, "The sweep's environment contract").
"""
from ampcheck.noise import nudge_ulps, seed_everything
from ampcheck.plan import Plan, PlanError, current_plan
from ampcheck.preflight import PreflightFinding, preflight
from ampcheck.recorder import COLUMNS, FORMAT, FORMAT_VERSION, PERTURBATIONS, Recorder, nudge_ulp

__version__ = "0.1.0"
__all__ = ["Recorder", "nudge_ulp", "nudge_ulps", "seed_everything", "preflight", "PreflightFinding", "COLUMNS",
           "FORMAT", "FORMAT_VERSION", "PERTURBATIONS", "Plan", "PlanError", "current_plan", "__version__"]
