"""The sweep's plan: what `ampcheck sweep -- <command>` asks one run of the user's unchanged script to train with.

`ampcheck sweep` runs the command once per run with AMPCHECK_PLAN=/abs/DIR/plans/<run>.json (docs/USING.md, "The
sweep's environment contract"). This module reads that file into a typed `Plan` (errors name the file and the field)
and holds the pieces every integration uses to apply it: the strategy table (parameter dtype, autocast dtype, scaler,
TF32), the refusals (fp8 without torchao or an FP8 GPU, fp16 master weights where the framework keeps none), the TF32
flags and the seed offset. Applying a plan through module / optimizer hooks (a plain loop's) is plan_hooks.py.

    plan = ampcheck.plan.current_plan()      # None outside a sweep
    if plan is not None:
        print(plan.run, plan.strategy, plan.record)
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Any

import torch

ENV = "AMPCHECK_PLAN"
VERSION = 1
PERTURBATIONS = ("", "seed", "order", "skip")
MAX_STEPS = 10_000_000  # the bound of `ampcheck sweep --steps`
SEED_OFFSET_LIMIT = 2**31 - 1  # the sweep writes 0 or 1


@dataclasses.dataclass(frozen=True)
class Precision:
    """What a strategy trains with."""

    param_dtype: torch.dtype  # the parameters' dtype
    autocast_dtype: torch.dtype | None  # autocast's dtype, None: no autocast
    grad_scaler: bool  # a dynamic GradScaler scales the loss
    tf32: bool  # TF32 matmuls / convolutions on CUDA


STRATEGIES: dict[str, Precision] = {
    "fp32": Precision(torch.float32, None, False, False),
    "tf32": Precision(torch.float32, None, False, True),
    "bf16-autocast": Precision(torch.float32, torch.bfloat16, False, False),
    "fp16-autocast-scaler": Precision(torch.float32, torch.float16, True, False),
    "pure-bf16": Precision(torch.bfloat16, None, False, False),
    "fp16-master-weights": Precision(torch.float16, None, True, False),  # fp32 master copies: framework's (refused)
    "fp8": Precision(torch.float32, None, False, False),  # torchao float8 linears over fp32 parameters
}


class PlanError(ValueError):
    """A plan file that cannot be used; the message names the file, the field, what was expected and a HINT."""


@dataclasses.dataclass(frozen=True)
class Plan:
    path: str  # the plan file itself
    version: int  # 1
    run: str  # this run's label, unique in the sweep (fp32, fp32-seed, probe-<strategy>-<n>, ...)
    strategy: str  # a key of STRATEGIES
    record: str  # where to record (overrides the path the script passes)
    max_steps: int  # stop after this many optimizer steps (0: the script's own length)
    seed_offset: int  # added to the seed(s) the integration controls
    perturbation: str  # "" | "seed" | "order" | "skip"
    keep_fp32: list[str]  # model.named_modules() names that run in FP32
    workload: str  # recorded as the 'workload' attribute

    @property
    def precision(self) -> Precision:
        return STRATEGIES[self.strategy]

    @property
    def recorded_perturbation(self) -> str:
        """The recording's 'perturbation' attribute: 'none' for a run that is not a noise run."""
        return self.perturbation or "none"

    def attributes(self, applied: str) -> dict[str, str]:
        """The attributes every recording made under this plan carries (besides the measured ones)."""
        return {
            "plan_run": self.run,
            "plan_strategy": self.strategy,
            "plan_applied": applied,
            "perturbation": self.recorded_perturbation,
            "workload": self.workload,
        }


def _error(path: str, field: str, expected: str, got: object) -> PlanError:
    return PlanError(
        f"{path}: field '{field}': expected {expected}, got {got!r}. HINT: the plan is written by "
        f"`ampcheck sweep`; run the script through it again, or unset {ENV} to run it on its own"
    )


def load_plan(path: str) -> Plan:
    """Reads and validates one plan file (every key of the contract present, of the right type)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PlanError(
            f"{path}: cannot read the plan named by {ENV}: {e.strerror or e}. HINT: run the script "
            f"through `ampcheck sweep`, or unset {ENV}"
        ) from None
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise PlanError(
            f"{path}: not JSON ({e}). HINT: the plan is written by `ampcheck sweep`; run the script "
            f"through it again, or unset {ENV}"
        ) from None
    if not isinstance(obj, dict):
        raise _error(path, "(top level)", "a JSON object", type(obj).__name__)

    def field(name: str, kind: Any, expected: str) -> Any:
        if name not in obj:
            raise _error(path, name, f"{expected} (the key is missing)", None)
        value = obj[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _error(path, name, expected, value)
        return value

    version = field("version", int, f"the number {VERSION}")
    if version != VERSION:
        raise _error(path, "version", f"{VERSION} (this ampcheck package reads plan version {VERSION})", version)
    run = field("run", str, "a non-empty run label")
    if not run:
        raise _error(path, "run", "a non-empty run label", run)
    strategy = field("strategy", str, "one of " + ", ".join(STRATEGIES))
    if strategy not in STRATEGIES:
        raise _error(path, "strategy", "one of " + ", ".join(STRATEGIES), strategy)
    record = field("record", str, "an absolute path ending in .h5, .hdf5 or .jsonl")
    if not os.path.isabs(record) or not record.endswith((".h5", ".hdf5", ".jsonl")):
        raise _error(path, "record", "an absolute path ending in .h5, .hdf5 or .jsonl", record)
    steps_expected = f"a whole number from 0 to {MAX_STEPS:,} (0: the script's own length)"
    max_steps = field("max_steps", int, steps_expected)
    if not 0 <= max_steps <= MAX_STEPS:
        raise _error(path, "max_steps", steps_expected, max_steps)
    offset_expected = f"a whole number from {-SEED_OFFSET_LIMIT:,} to {SEED_OFFSET_LIMIT:,} (added to a seed)"
    seed_offset = field("seed_offset", int, offset_expected)
    if not -SEED_OFFSET_LIMIT <= seed_offset <= SEED_OFFSET_LIMIT:  # (torch.manual_seed takes 64 bits)
        raise _error(path, "seed_offset", offset_expected, seed_offset)
    perturbation = field("perturbation", str, "one of '', 'seed', 'order', 'skip'")
    if perturbation not in PERTURBATIONS:
        raise _error(path, "perturbation", "one of '', 'seed', 'order', 'skip'", perturbation)
    keep = field("keep_fp32", list, "a list of module names (model.named_modules())")
    if not all(isinstance(k, str) for k in keep):
        raise _error(path, "keep_fp32", "a list of module names (strings)", keep)
    workload = field("workload", str, "a string")
    return Plan(
        os.path.abspath(path),
        version,
        run,
        strategy,
        record,
        max_steps,
        seed_offset,
        perturbation,
        list(keep),
        workload,
    )


_cache: dict[str, Plan] = {}


def current_plan() -> Plan | None:
    """The plan named by AMPCHECK_PLAN, or None when it is unset or empty (the script runs on its own). A bad plan
    raises PlanError (the sweep reports the run's output)."""
    path = os.environ.get(ENV, "")
    if not path:
        return None
    if path not in _cache:
        _cache[path] = load_plan(path)
    return _cache[path]


# ---- refusals ---------------------------------------------------------------------------------------------------


def fp8_refusal(device: torch.device) -> str | None:
    """Why torchao float8 training cannot run here, or None."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        return "fp8 needs torchao (torchao.float8), which is not installed"
    if device.type != "cuda":
        return f"fp8 needs a CUDA GPU with FP8 (sm89 or later); the model is on {device.type}"
    if torch.cuda.get_device_capability(device) < (8, 9):
        major, minor = torch.cuda.get_device_capability(device)
        return f"fp8 needs a GPU with FP8 (sm89 or later); this one is sm{major}{minor}"
    return None


def refusal(plan: Plan, device: torch.device, framework: str) -> str | None:
    """Why `framework` cannot train `plan.strategy` on `device` (the recording's plan_applied says 'refused: <why>'),
    or None."""
    if plan.strategy == "fp16-master-weights":
        return (
            f"{framework} keeps no fp32 master copy of fp16 parameters (model.half() with an optimizer over "
            f"the fp16 parameters loses small updates; fp16 with a GradScaler needs fp32 parameters)"
        )
    if plan.strategy == "fp8":
        return fp8_refusal(device)
    if plan.strategy == "tf32" and device.type != "cuda":
        return f"tf32 is a CUDA matmul mode; the model is on {device.type}"
    if plan.strategy == "bf16-autocast" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16"
    return None


# ---- global state the plan sets -----------------------------------------------------------------------------------


def set_tf32(enabled: bool) -> None:
    """TF32 for CUDA matmuls and cuDNN convolutions on (tf32) or off (every other strategy), through torch's
    fp32_precision settings (torch >= 2.9; the allow_tf32 flags before)."""
    mode = "tf32" if enabled else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.fp32_precision = mode
    else:  # older torch
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def reseed(base_seed: int, plan: Plan) -> int:
    """Seeds Python's, NumPy's and torch's global RNGs with base_seed + plan.seed_offset; returns that seed. For the
    seed run (seed_offset 1) of an integration that controls no init seed: what draws from the global RNGs from here
    on (data order, dropout) changes."""
    seed = base_seed + plan.seed_offset
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    return seed


def is_container(module: torch.nn.Module) -> bool:
    """A module with no forward of its own (ModuleList, ModuleDict): never called, so hooks on it never run — keeping
    it in FP32 would keep nothing; its children are what runs."""
    return type(module).forward is torch.nn.Module.forward


def module_table(model: torch.nn.Module) -> str:
    """The 'modules' attribute: JSON list of [name, parameter count (the module's and its children's)] in
    model.named_modules() order; the root is ''. Containers (is_container) are left out: a localization searches
    the modules that run (a container's children are its parent's in the search)."""
    return json.dumps(
        [[name, sum(p.numel() for p in m.parameters())] for name, m in model.named_modules() if not is_container(m)],
        separators=(",", ":"),
    )


def unknown_modules(model: torch.nn.Module, names: list[str]) -> list[str]:
    known = {n for n, _ in model.named_modules()}
    return [n for n in names if n not in known]
