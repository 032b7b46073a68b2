"""What the recorder reads from torch about the run it records (python/src/ampcheck/recorder.py): the optimizer inside a
framework's wrapper, this process's rank and world size (and a per-rank file's name), whether autocast is on and in
which dtype, and the device's attributes for the file."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside a framework's wrapper — accelerate's AcceleratedOptimizer (`.optimizer`, itself an
    Optimizer subclass whose hooks never fire), Lightning's LightningOptimizer (`._optimizer`) — or the optimizer."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            inner = getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            return optimizer
        optimizer = inner
    return optimizer


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this process: torch.distributed's once initialized, else the launcher's RANK and
    WORLD_SIZE (torchrun, accelerate launch set them before the process group exists); (0, 1) alone."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def rank_path(path: str, rank: int) -> str:
    """`runs/fp16.h5` -> `runs/fp16.rank1.h5`: a per-rank file's name."""
    for ext in (".hdf5", ".h5", ".jsonl"):
        if path.endswith(ext):
            return f"{path[: -len(ext)]}.rank{rank}{ext}"
    return f"{path}.rank{rank}"


def autocast_dtype(device_type: str) -> str:
    try:
        on, dtype = torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError, AttributeError):  # older torch: the per-device functions
        if device_type == "cpu":
            on, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
        elif device_type == "cuda":
            on, dtype = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        else:
            return "unknown"
    return str(dtype).replace("torch.", "") if on else "none"


def device_attributes(cuda: bool) -> dict[str, str]:
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        return {
            "device_name": torch.cuda.get_device_name(),
            "device_class": f"cuda-sm{major}{minor}",
            "cuda_version": str(torch.version.cuda),
        }
    return {"device_name": platform.processor() or platform.machine(), "device_class": "cpu"}
