"""Noise runs made easy: the FP32 runs `ampcheck reference` measures the allowed deviation on (python/README.md).

The default spread is an FP32 run with another init seed and one whose first optimizer.step() is not taken; for a
model loaded with `from_pretrained` there is no init seed to vary — use another data order (the sampler's seed) or
another dropout seed instead of `seed`, and ulp nudges only beside them (alone they are refused: they measure
rounding chaos, not an equally valid training).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable

import torch

from ampcheck.recorder import nudge_ulp


def nudge_ulps(model: torch.nn.Module | Iterable[torch.Tensor], k: int) -> None:
    """Move every floating parameter of `model` |k| ulps up (k > 0) or down (k < 0), in place, without grad (torch.nextafter
    |k| times). For `ulp` noise runs (record them with perturbation="ulp")."""
    if not isinstance(k, int) or k == 0:
        raise ValueError(f"k {k!r}: a non-zero whole number of ulps")
    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else list(model)
    for _ in range(abs(k)):
        nudge_ulp(params, 1 if k > 0 else -1)


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python's, NumPy's (if installed) and torch's global RNGs (every CUDA device too) — for scripts with one
    global RNG, where the `seed` noise run is the same script with another seed. deterministic=True also asks torch for
    deterministic algorithms (and sets CUBLAS_WORKSPACE_CONFIG where unset, which cuBLAS needs for that)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
