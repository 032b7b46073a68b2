"""The recorder's measurements of grads and parameters (python/src/ampcheck/recorder.py): statistics of many grads in a
few fused ops on their device with no host sync (torch._foreach_norm, counts over concatenated small grads), the
2-norm of a list of tensors, autograd's end-of-backward callback; and nudge_ulp for the `ulp` noise runs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Callable

import torch


def nudge_ulp(model: torch.nn.Module | Iterable[torch.Tensor], direction: int = +1) -> None:
    """Move every floating parameter of `model` (a Module, or an iterable of tensors) one ulp up (direction=+1) or
    down (-1), in place, without grad: torch.nextafter towards +inf / -inf. For the noise runs `ampcheck reference`
    takes: make the FP32 run again with nudged initial weights and record it with perturbation="ulp".

    An ulp run measures chaos — how fast two FP32 runs one rounding apart drift apart — not the spread of an equally
    valid training (another seed, another data order). `ampcheck reference` needs at least one `seed` or `order`
    run; ulp runs only add to them."""
    if direction not in (1, -1):
        raise ValueError(f"direction {direction!r}: must be +1 or -1")
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    with torch.no_grad():
        for p in params:
            if p.is_floating_point():
                p.copy_(torch.nextafter(p, torch.tensor(math.inf * direction, dtype=p.dtype, device=p.device)))


_FINFO: dict[torch.dtype, torch.finfo] = {}
_CONCAT_BELOW = {"cuda": 1 << 24}  # grads smaller than this (elements) are concatenated and counted together; CPU:
_CONCAT_BELOW_OTHER = 1 << 16  # copying large grads costs more than the per-tensor ops it saves (a GPU: the launches)


class GradStats:
    """A batch of grads' statistics on one device, with no host sync: sumsq (0-d float64, the sum of their squared
    2-norms, each norm in fp32 for 16-bit grads), counts (float64 (3,): non-zero elements, elements with |g| < tiny
    (zeros included), elements with |g| <= max (finite)) and numel (int, on the host). NaN is non-zero and fails both
    comparisons."""

    __slots__ = ("sumsq", "counts", "numel")

    def __init__(self, sumsq: torch.Tensor, counts: torch.Tensor, numel: int) -> None:
        self.sumsq, self.counts, self.numel = sumsq, counts, numel


def grad_stats(grads: Sequence[torch.Tensor]) -> GradStats:
    """Statistics of every grad in `grads` (GradStats, on the first grad's device) in a few fused ops whatever the
    number of parameters: the norms by torch._foreach_norm per (device, dtype), the counts over the small grads
    concatenated (large ones alone). Sparse grads (nn.Embedding(sparse=True)) count their implicit zeros."""
    dev = grads[0].device if grads else torch.device("cpu")
    norms: list[torch.Tensor] = []
    counts: list[torch.Tensor] = []
    numel = 0
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        g = g.detach()  # (a grad made with create_graph=True has history; no op here records any)
        implicit = 0
        if g.layout != torch.strided:  # its stored values, plus the implicit zeros as non-zero-free elements
            n = g.numel()
            g = (g if g.is_sparse else g.to_sparse()).coalesce().values()
            implicit = n - g.numel()
            counts.append(torch.tensor([0.0, implicit, implicit], dtype=torch.float64, device=g.device))
            numel += implicit
        groups.setdefault((g.device, g.dtype), []).append(g)
    for (device, dtype), gs in groups.items():
        info = _FINFO.get(dtype) or _FINFO.setdefault(dtype, torch.finfo(dtype))
        norms.extend(torch._foreach_norm(gs, 2, dtype=torch.float32 if info.bits < 32 else None))
        below = _CONCAT_BELOW.get(device.type, _CONCAT_BELOW_OTHER)
        small = [g.reshape(-1) for g in gs if g.numel() < below]
        flats = [g.reshape(-1) for g in gs if g.numel() >= below]
        for i in range(0, len(small), 512):  # torch.cat of this many at once
            flats.append(torch.cat(small[i : i + 512]) if len(small) > i + 1 else small[i])
        for flat in flats:
            mag = flat.abs()
            counts.append(
                torch.stack(
                    [
                        torch.count_nonzero(flat),
                        torch.count_nonzero(mag < info.tiny),
                        torch.count_nonzero(mag <= info.max),
                    ]
                ).to(dev, torch.float64)
            )
            numel += flat.numel()
    if not norms:
        zero = torch.zeros((), dtype=torch.float64, device=dev)
        return GradStats(zero, torch.zeros(3, dtype=torch.float64, device=dev), numel)
    sumsq = torch.stack([n.to(dev) for n in norms]).double().square().sum()
    return GradStats(sumsq, torch.stack(counts).sum(0), numel)


def queue_callback(callback: Callable[[], None]) -> None:
    """Run `callback` at the end of the running backward (autograd's final callbacks; the engine runs those queued
    by a callback too, after the others)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    norm: torch.Tensor = torch.linalg.vector_norm(
        torch.stack(torch._foreach_norm([t.float() for t in tensors])).double()
    )
    return norm
