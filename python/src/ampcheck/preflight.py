"""Preflight: before the first step, what will go wrong with this model / optimizer / scaler, in PyTorch's terms.

    findings = ampcheck.preflight(model, optimizer, scaler=scaler, mixed_precision="fp16")

Errors (raised as PreflightError, a ValueError, unless raise_on_error=False; its text starts with PyTorch's own):
  - fp16 parameters with an enabled GradScaler: PyTorch raises "Attempting to unscale FP16 gradients." at the first
    unscale_ / step — the optimizer has no fp32 master weights (`model.half()`).
Warnings (warnings.warn, and returned):
  - mixed precision asked for but not in effect: a disabled GradScaler with fp16 asked for; fp16 asked for without a
    scaler over fp32 parameters (small gradients underflow in the fp16 backward); autocast not available for the
    parameters' device type;
  - fp16 parameters (`model.half()`) under Adam / AdamW: eps 1e-8 is below fp16's smallest subnormal (6e-8) and rounds
    to 0 in the fp16 update, so an element whose second moment is 0 (a zero grad, or one under 2.4e-4 whose square
    underflows) divides 0 by 0 or m by 0: on a tiny GPT-2 (examples/sweep) nearly every parameter is inf/NaN
    after the first step and the loss is NaN from the second (python/tests/test_preflight.py shows it);
  - fp16 / bf16 asked for where the framework runs nothing in it (autocast_active=False: e.g. `fp16=True` on a CPU,
    where accelerate makes no autocast and no GradScaler) — said so, with no fp16 underflow warning;
  - pure bf16 / fp16 parameters under Adam / AdamW with a learning rate below half an ulp of most weights: an Adam
    update is about lr per element, and an update under half an ulp rounds away (lost updates);
  - parameters that require grad but are in no optimizer param group (they never train).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch
from torch.amp.grad_scaler import GradScaler

from ampcheck.plan_hooks import BackwardHookScaler


@dataclasses.dataclass
class PreflightFinding:
    severity: str  # "error" | "warning"
    check: str  # fp16_params_with_scaler | scaler_disabled | fp16_without_scaler | autocast_unavailable |
    # mixed_not_in_effect | adam_eps_below_fp16 | lost_updates | params_not_in_optimizer
    message: str


class PreflightError(ValueError):
    """A setup that PyTorch will refuse; the message starts with PyTorch's own error text."""

    def __init__(self, findings: list[PreflightFinding]) -> None:
        self.findings = findings
        super().__init__("\n".join(f.message for f in findings if f.severity == "error"))


_HALF_ULP = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # half an ulp, relative to the value


def _unwrap(optimizer: Any) -> Any:
    """accelerate's AcceleratedOptimizer and Lightning's LightningOptimizer hold the torch optimizer."""
    from ampcheck.recorder import unwrap_optimizer

    return unwrap_optimizer(optimizer) if optimizer is not None else None


def preflight(
    model: torch.nn.Module,
    optimizer: Any = None,
    *,
    scaler: GradScaler | BackwardHookScaler | None = None,
    mixed_precision: str | None = None,
    raise_on_error: bool = True,
    warn: bool = True,
    autocast_active: bool | None = None,
) -> list[PreflightFinding]:
    """Checks the setup before training; mixed_precision: "fp16", "bf16" or None (what the run asks for);
    autocast_active: False where the framework will run no autocast for it (None: unknown, assumed on)."""
    if mixed_precision not in (None, "no", "fp32", "fp16", "bf16"):
        raise ValueError(f"mixed_precision {mixed_precision!r}: expected 'fp16', 'bf16' or None")
    findings: list[PreflightFinding] = []
    params = [p for p in model.parameters()]
    trainable = [p for p in params if p.requires_grad]
    names = {id(p): n for n, p in model.named_parameters()}
    opt = _unwrap(optimizer)
    scaler_on = scaler is not None and scaler.is_enabled()
    fp16 = [p for p in trainable if p.dtype == torch.float16]
    if scaler_on and fp16:
        findings.append(
            PreflightFinding(
                "error",
                "fp16_params_with_scaler",
                f"Attempting to unscale FP16 gradients. — PyTorch will raise this (ValueError) at the first "
                f"scaler.unscale_() / scaler.step(): {len(fp16)} of {len(trainable)} trainable parameters are fp16 "
                f"(model.half()?), so the optimizer has no fp32 master weights to unscale into. Keep the parameters in "
                f"fp32 and run the forward under torch.autocast(dtype=torch.float16) with the GradScaler, or use bf16 "
                f"autocast without a scaler.",
            )
        )
    if mixed_precision == "fp16" and scaler is not None and not scaler.is_enabled():
        findings.append(
            PreflightFinding(
                "warning",
                "scaler_disabled",
                "fp16 mixed precision was asked for but the GradScaler is disabled (enabled=False, or made for a device "
                "type it does not support): scale(), step() and update() pass the loss and grads through unchanged — "
                "no loss scaling, no skipped overflow steps. A run 'in fp16' that is plain FP32 is likely.",
            )
        )
    if mixed_precision in ("fp16", "bf16") and autocast_active is False and not scaler_on:
        device_type = trainable[0].device.type if trainable else "cpu"
        findings.append(
            PreflightFinding(
                "warning",
                "mixed_not_in_effect",
                f"{mixed_precision} mixed precision was asked for, but nothing will run in {mixed_precision}: the "
                f"framework makes no autocast (and no GradScaler) on '{device_type}' for it, so this run trains in the "
                f"parameters' dtype ({str(trainable[0].dtype).replace('torch.', '') if trainable else 'float32'}). "
                f"Under the HF Trainer on a CPU, `ampcheck sweep`'s fp16 run supplies a CPU GradScaler and fp16 "
                f"autocast (docs/USING.md).",
            )
        )
        mixed_precision = None  # nothing runs in it: the checks below do not apply
    if mixed_precision == "fp16" and scaler is None and trainable and not fp16:
        findings.append(
            PreflightFinding(
                "warning",
                "fp16_without_scaler",
                "fp16 mixed precision over fp32 parameters without a GradScaler: gradients under fp16's smallest "
                "subnormal (6e-8) flush to zero in the fp16 backward. Use GradScaler, or bf16.",
            )
        )
    if mixed_precision in ("fp16", "bf16") and trainable:
        device_type = trainable[0].device.type
        available = getattr(torch.amp.autocast_mode, "is_autocast_available", lambda d: True)(device_type)
        if not available:
            findings.append(
                PreflightFinding(
                    "warning",
                    "autocast_unavailable",
                    f"{mixed_precision} mixed precision asked for, but autocast is not available for device type "
                    f"'{device_type}': the forward runs in the parameters' dtype.",
                )
            )
    if opt is not None and isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)) and fp16:
        in_fp16 = {id(p) for p in fp16}
        for group in opt.param_groups:
            eps = float(group.get("eps", 1e-8))
            if any(id(p) in in_fp16 for p in group["params"]) and float(torch.tensor(eps, dtype=torch.float16)) == 0:
                findings.append(
                    PreflightFinding(
                        "warning",
                        "adam_eps_below_fp16",
                        f"{type(opt).__name__} over fp16 parameters (model.half()?): eps {eps:g} is below fp16's smallest "
                        f"subnormal (6e-8) and rounds to 0 in the fp16 update, so every element whose second moment is 0 "
                        f"(a zero grad, or one under 2.4e-4 whose square underflows) becomes NaN or inf — on a tiny GPT-2 "
                        f"the loss is NaN from the second step. Keep fp32 parameters and train under "
                        f"torch.autocast(dtype=torch.float16) with a GradScaler (or bf16 autocast).",
                    )
                )
                break
    if opt is not None and isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        for group in opt.param_groups:
            lr = float(group.get("lr", 0.0))
            for p in group["params"]:
                half = _HALF_ULP.get(p.dtype)
                if half is None or p.numel() == 0 or lr <= 0:
                    continue
                with torch.no_grad():
                    lost = float((p.detach().abs().float() * half > lr).float().mean())
                if lost > 0.5:
                    findings.append(
                        PreflightFinding(
                            "warning",
                            "lost_updates",
                            f"{names.get(id(p), 'a parameter')} is {str(p.dtype).replace('torch.', '')} and lr {lr:g}: "
                            f"an Adam update of about lr is under half an ulp for {lost:.0%} of its elements and rounds "
                            f"away (lost updates). Keep fp32 master weights (autocast over fp32 parameters), or raise "
                            f"the lr.",
                        )
                    )
                    break
    if opt is not None:
        in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
        missing = [names.get(id(p), "?") for p in trainable if id(p) not in in_opt]
        if missing:
            findings.append(
                PreflightFinding(
                    "warning",
                    "params_not_in_optimizer",
                    f"{len(missing)} parameter(s) require grad but are in no optimizer param group and will never "
                    f"train: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}",
                )
            )
    if warn:
        for f in findings:
            if f.severity == "warning":
                warnings.warn(f"ampcheck preflight: {f.message}", stacklevel=2)
    if raise_on_error and any(f.severity == "error" for f in findings):
        raise PreflightError(findings)
    return findings
