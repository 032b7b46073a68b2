#!/usr/bin/env python3
"""PyTorch oracle for the error behaviour of ampcheck's C++ GradScaler (harness/tests/amp/gradscaler_oracle_test.cpp).

Triggers every misuse that torch.amp.GradScaler reports (and a few look-alikes it accepts) and records, per case,
the exception's type name and str() -- "none" and an empty message where Python raises nothing. The C++ test drives
its GradScaler into the same situations, by the same case keys, and compares GradScalerError::python_type() and
what() (or, for errors raised by ATen itself, c10::Error::what_without_backtrace(), which is what Python prints).

Writes --out as text, one case a line: <key> TAB <exception type name or none> TAB <message>.

Usage: gradscaler_errors.py --out FILE [--device cpu|cuda]
"""
import argparse
import math

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    dev = args.device

    def scaler(**kw):
        return torch.amp.GradScaler(dev, **kw)

    def opt_with_grad(dtype=torch.float32, with_grad=True):
        p = torch.nn.Parameter(torch.zeros(3, dtype=dtype, device=dev))
        if with_grad:
            p.grad = torch.ones(3, dtype=dtype, device=dev)
        return torch.optim.SGD([p], lr=1.0)

    def started(**kw):
        s = scaler(**kw)
        s.scale(torch.ones((), device=dev))
        return s

    def fp16_unscale():
        started().unscale_(opt_with_grad(torch.float16))

    def fp16_step():
        started().step(opt_with_grad(torch.float16))

    def unscale_twice():
        s, o = started(), opt_with_grad()
        s.unscale_(o)
        s.unscale_(o)

    def unscale_after_step():
        s, o = started(), opt_with_grad()
        s.step(o)
        s.unscale_(o)

    def step_twice():
        s, o = started(), opt_with_grad()
        s.step(o)
        s.step(o)

    def unscale_before_scale():
        scaler().unscale_(opt_with_grad())

    def step_before_scale():
        scaler().step(opt_with_grad())

    def update_before_scale():
        scaler().update()

    def update_without_inf_checks():
        started().update()

    def step_without_grads():
        started().step(opt_with_grad(with_grad=False))

    def load_empty_state_dict():
        scaler().load_state_dict(scaler(enabled=False).state_dict())

    def growth_factor_one():
        scaler(growth_factor=1.0)

    def backoff_factor_one():
        scaler(backoff_factor=1.0)

    def nan_growth_factor():  # accepted: `nan <= 1.0` is False
        scaler(growth_factor=math.nan)

    def nan_backoff_factor():  # accepted: `nan >= 1.0` is False
        scaler(backoff_factor=math.nan)

    def bad_factors_when_disabled():  # accepted: the checks run only when enabled
        scaler(growth_factor=0.5, backoff_factor=2.0, enabled=False)

    def stepped_scaler():
        s, o = started(), opt_with_grad()
        s.step(o)
        return s

    def update_tensor_two_elements():
        stepped_scaler().update(torch.full((2,), 8.0, device=dev))

    def update_tensor_requires_grad():
        stepped_scaler().update(torch.full((), 8.0, device=dev, requires_grad=True))

    def update_tensor_other_device():
        stepped_scaler().update(torch.full((), 8.0, device="meta"))

    def update_tensor_shape_one():  # "1-element", but copy_ into the 0-dim scale refuses shape [1]
        stepped_scaler().update(torch.full((1,), 8.0, device=dev))

    def bf16_unscale():  # fine on the CPU; the CUDA inf-check kernel has no bfloat16 (NotImplementedError)
        started().unscale_(opt_with_grad(torch.bfloat16))

    def update_tensor_zero_dim():
        stepped_scaler().update(torch.full((), 8.0, device=dev))

    cases = [fp16_unscale, fp16_step, unscale_twice, unscale_after_step, step_twice, unscale_before_scale,
             step_before_scale, update_before_scale, update_without_inf_checks, step_without_grads,
             load_empty_state_dict, growth_factor_one, backoff_factor_one, nan_growth_factor, nan_backoff_factor,
             bad_factors_when_disabled, update_tensor_two_elements, update_tensor_requires_grad,
             update_tensor_other_device, update_tensor_shape_one, update_tensor_zero_dim, bf16_unscale]
    lines = []
    for case in cases:
        try:
            case()
            kind, message = "none", ""
        except Exception as e:  # noqa: BLE001 -- recording whatever Python raises is the point
            kind, message = type(e).__name__, str(e)
        assert "\t" not in message and "\n" not in message, (case.__name__, message)
        lines.append(f"{case.__name__}\t{kind}\t{message}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"gradscaler_errors: {len(lines)} cases on {dev}, wrote {args.out}")


if __name__ == "__main__":
    main()
