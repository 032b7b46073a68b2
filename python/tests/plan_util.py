"""Sweep plans for the tests: a plan file as `ampcheck sweep` writes it (docs/USING.md, "The sweep's environment
contract"), the attributes each strategy must record, and a reader of a recording's attributes and columns."""

import json
import os

import h5py

# what each strategy records (autocast_dtype, param_dtype, grad_scaler) on a CPU
EXPECTED = {
    "fp32": ("none", "float32", "none"),
    "bf16-autocast": ("bfloat16", "float32", "none"),
    "fp16-autocast-scaler": ("float16", "float32", "enabled"),
    "pure-bf16": ("none", "bfloat16", "none"),
}
# the runs every integration is tested under: (run label, strategy, plan fields)
RUNS = [
    ("fp32", "fp32", {}),
    ("bf16-autocast", "bf16-autocast", {}),
    ("fp16-autocast-scaler", "fp16-autocast-scaler", {}),
    ("pure-bf16", "pure-bf16", {}),
    ("fp32-skip", "fp32", {"perturbation": "skip"}),
    ("fp32-seed", "fp32", {"perturbation": "seed", "seed_offset": 1}),
]
STEPS = 6


def write_plan(d, run, strategy, **fields):
    os.makedirs(os.path.join(d, "plans"), exist_ok=True)
    plan = {
        "version": 1,
        "run": run,
        "strategy": strategy,
        "record": os.path.join(d, "runs", run + ".h5"),
        "max_steps": STEPS,
        "seed_offset": 0,
        "perturbation": "",
        "keep_fp32": [],
        "workload": "sweep-test",
    }
    plan.update(fields)
    path = os.path.join(d, "plans", run + ".json")
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def read(path):
    with h5py.File(path) as f:
        return dict(f.attrs), {k: f["steps"][k][:] for k in f["steps"]}


def check_run(d, run, strategy, fields):
    """The recording of one planned run carries the plan and the planned precision, with STEPS steps."""
    attrs, cols = read(os.path.join(d, "runs", run + ".h5"))
    assert attrs["status"] == "completed", attrs.get("error")
    assert attrs["plan_run"] == run and attrs["plan_strategy"] == strategy and attrs["plan_applied"] == "yes", attrs
    assert attrs["workload"] == "sweep-test"
    assert (attrs["autocast_dtype"], attrs["param_dtype"], attrs["grad_scaler"]) == EXPECTED[strategy], attrs
    assert attrs["perturbation"] == (fields.get("perturbation") or "none")
    assert len(cols["loss"]) == STEPS, len(cols["loss"])
    modules = json.loads(attrs["modules"])
    assert modules[0][0] == "" and modules[0][1] > 0 and any(n.endswith("mlp.c_fc") for n, _ in modules)
    if fields.get("perturbation") == "skip":
        assert cols["skipped"][0] == 1 and cols["skipped"][1:].sum() == 0, cols["skipped"]
    else:
        assert cols["skipped"].sum() == 0, cols["skipped"]
    return attrs, cols
