#!/usr/bin/env python3
"""PyTorch oracle for ampcheck's C++ GradScaler (harness/tests/amp/gradscaler_oracle_test.cpp).

Runs torch.amp.GradScaler -- the reference the C++ port must match bit for bit -- over a deterministic stream of
gradients with planted inf, -inf, nan and huge values, for a handful of parameters of mixed shapes, dtypes (float32
plus a low-precision dtype: bfloat16 on the CPU; see --low-precision for CUDA) and gradient layouts (contiguous,
transposed, strided slice, no grad at all; only contiguous and none for fused AdamW on CUDA, whose kernel requires
grads laid out like their params). Every step: the generated grads are scaled with scaler.scale() into the
parameters' .grad buffers, unscale_() is called explicitly on some steps (not with float16 grads, which it refuses)
and left to step() on the others, then step() and update() (on two steps a manual update(new_scale) instead). The
optimizer is torch.optim.SGD with momentum (foreach=False), or torch.optim.AdamW(fused=True), which GradScaler drives
through its grad_scale / found_inf hand-over instead of a host-side skip.

Writes into --out:
  manifest.txt   text, one item a line:
                   config <key> <value>                  (floats in repr(), which round-trips exactly)
                   param <name> <dtype> <layout> <dims...>
                   unscale_steps <step...>
                   manual_update <step> <float|tensor> <value>
                   array <name> <dtype> <dims...>         (one <name>.bin per array)
  <name>.bin     raw little-endian C-contiguous data of that array (16-bit floats as their bit patterns)

Arrays: init.<param> (initial values), grad_in.<param> [steps, ...] (generated, unscaled, planted grads),
grad_out.<param> [steps, ...] (.grad after step()), param_out.<param> [steps, ...] (params after step()),
adam_step.<param> [steps] (AdamW's state step after step()), found_inf [steps] (sum of the scaler's found_inf for the
optimizer after step()), scale [steps] and growth_tracker [steps] (after update()).

Usage: gradscaler_oracle.py --out DIR [--optimizer sgd|adamw_fused] [--device cpu|cuda] [--steps 300]
                            [--low-precision bfloat16|float16|float32]
"""
import argparse
import math
import os
import sys

import torch

LOW = "low"  # placeholder for the low-precision dtype, chosen by --low-precision

# name, dtype, grad layout, shape. "transposed": .grad is a transposed view (non-contiguous, dense);
# "sliced": .grad is every other column of a wider buffer, offset by one (non-contiguous, not dense);
# "nograd": the parameter never gets a grad (GradScaler and the optimizer must skip it).
PARAMS = [
    ("w_f32", torch.float32, "contiguous", (7, 5)),
    ("w_f32_t", torch.float32, "transposed", (6, 4)),
    ("b_low", LOW, "contiguous", (33,)),
    ("w_f32_slice", torch.float32, "sliced", (5, 3)),
    ("w_low_t", LOW, "transposed", (3, 4)),
    ("frozen_f32", torch.float32, "nograd", (4,)),
]

CONFIG = {
    # A scale that is not a power of two makes the unscaled grads inexact, so the test also pins down how
    # 1/scale is rounded (double reciprocal, then float32).
    "init_scale": 1234.5,
    "growth_factor": 2.0,
    "backoff_factor": 0.5,
    "growth_interval": 3,  # small, so that the scale grows often between the planted faults
    "lr": 0.05,
    "momentum": 0.9,
    "adam_lr": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-08,
    "adam_weight_decay": 0.01,
    "seed": 20240611,
}

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.int32: "int32"}


def make_grad_holder(shape, dtype, layout, device):
    """The tensor that becomes param.grad, in the layout the C++ test rebuilds identically."""
    if layout == "contiguous":
        return torch.zeros(shape, dtype=dtype, device=device)
    if layout == "transposed":
        rows, cols = shape
        return torch.zeros((cols, rows), dtype=dtype, device=device).t()
    if layout == "sliced":
        rows, cols = shape
        return torch.zeros((rows, 2 * cols + 1), dtype=dtype, device=device)[:, 1::2]
    raise ValueError(layout)


def planted(step):
    """[(param index, flat index, value)] written into the generated (unscaled) grads at this step.

    Non-finite values skip the step whatever the scale; 3e38 overflows after scaling by any scale above ~1.13;
    2e35 overflows only while the scale is above ~1.7e3, so whether it skips depends on the scale's history.
    """
    grad_params = 5
    faults = []
    nonfinite = [math.inf, -math.inf, math.nan]
    if step % 13 == 5:
        faults.append((step % grad_params, 3 * step, nonfinite[step % 3]))
    if step % 37 == 20:  # two params broken in the same step
        faults.append((1, step, math.nan))
        faults.append((4, step + 1, -math.inf))
    if step % 7 == 3:
        faults.append(((step // 7) % grad_params, step, 2.0e35 if step % 2 else -2.0e35))
    if step % 41 == 17:
        faults.append((2, 0, 3.0e38))
    return faults


def is_explicit_unscale(step, allowed):
    return allowed and step % 4 in (1, 2)


# Manual update(new_scale) steps; values that are not powers of two keep the unscaled grads inexact afterwards.
MANUAL_UPDATES = {150: ("float", 2000.0), 222: ("tensor", 4100.5)}


def write_array(out_dir, manifest, name, tensor):
    tensor = tensor.detach().cpu().contiguous()
    with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
        f.write(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    manifest.append(" ".join(["array", name, DTYPE_NAMES[tensor.dtype]] + [str(d) for d in tensor.shape]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--optimizer", choices=["sgd", "adamw_fused"], default="sgd")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--low-precision", choices=["bfloat16", "float16", "float32"], default=None,
                    help="dtype of the two low-precision params. Default: bfloat16 on cpu; on cuda float16 for "
                         "adamw_fused and float32 for sgd, because the CUDA kernel of "
                         "_amp_foreach_non_finite_check_and_unscale_ has no bfloat16 (GradScaler('cuda') raises "
                         "NotImplementedError for bfloat16 grads) and unscale_() refuses float16 grads")
    args = ap.parse_args()
    low_name = args.low_precision or ("bfloat16" if args.device == "cpu" else
                                      "float16" if args.optimizer == "adamw_fused" else "float32")
    low = getattr(torch, low_name)
    if low == torch.float16 and args.optimizer == "sgd":
        ap.error("float16 grads need --optimizer adamw_fused: the non-fused path unscales, which refuses float16")
    params_spec = [(n, low if d == LOW else d, layout, shape) for n, d, layout, shape in PARAMS]
    # PyTorch's CUDA fused AdamW requires params, grads and states of one layout, so there every grad is contiguous
    # (the transposed and sliced grads are covered on the CPU, and by SGD on CUDA).
    if args.device != "cpu" and args.optimizer == "adamw_fused":
        params_spec = [(n, d, layout if layout == "nograd" else "contiguous", shape)
                       for n, d, layout, shape in params_spec]
    # unscale_() refuses float16 grads, so with float16 params every step leaves the inf check to step()
    # (the fused path's _check_inf_per_device accepts float16).
    explicit_ok = low != torch.float16
    assert sys.byteorder == "little"
    # Tiny tensors: one intra-op thread avoids OpenMP hand-offs that cost seconds on a busy machine. Every op here is
    # elementwise, so results do not depend on it (the C++ replay does the same).
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device(args.device)
    steps = args.steps

    # Everything random is drawn on the CPU from one seeded generator, so every device sees the same inputs.
    gen = torch.Generator().manual_seed(CONFIG["seed"])
    params, holders, inits = [], [], []
    for name, dtype, layout, shape in params_spec:
        init = torch.randn(shape, generator=gen).to(dtype)
        inits.append(init)
        p = torch.nn.Parameter(init.clone().to(dev))
        if layout != "nograd":
            holder = make_grad_holder(shape, dtype, layout, dev)
            assert holder.is_contiguous() == (layout == "contiguous")
            p.grad = holder
            holders.append(holder)
        else:
            holders.append(None)
        params.append(p)

    grad_in = []  # per step, per param (None for nograd)
    for step in range(steps):
        row = []
        for name, dtype, layout, shape in params_spec:
            row.append(None if layout == "nograd" else torch.randn(shape, generator=gen))
        grad_indices = [i for i, (_, _, layout, _) in enumerate(params_spec) if layout != "nograd"]
        for which, flat, value in planted(step):
            g = row[grad_indices[which]]
            g.view(-1)[flat % g.numel()] = value
        grad_in.append([None if g is None else g.to(params_spec[i][1]) for i, g in enumerate(row)])

    if args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=CONFIG["lr"], momentum=CONFIG["momentum"], foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr=CONFIG["adam_lr"], betas=(CONFIG["adam_beta1"], CONFIG["adam_beta2"]),
                                eps=CONFIG["adam_eps"], weight_decay=CONFIG["adam_weight_decay"], fused=True)
        assert opt._step_supports_amp_scaling
    scaler = torch.amp.GradScaler(dev.type, init_scale=CONFIG["init_scale"], growth_factor=CONFIG["growth_factor"],
                                  backoff_factor=CONFIG["backoff_factor"], growth_interval=CONFIG["growth_interval"])

    rec = {"scale": [], "growth_tracker": [], "found_inf": []}
    grad_out = [[] for _ in params_spec]
    param_out = [[] for _ in params_spec]
    adam_step = [[] for _ in params_spec]
    for step in range(steps):
        for i, holder in enumerate(holders):
            if holder is not None:
                holder.copy_(scaler.scale(grad_in[step][i].to(dev)))
        if is_explicit_unscale(step, explicit_ok):
            scaler.unscale_(opt)
        scaler.step(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        rec["found_inf"].append(torch.tensor(found, dtype=torch.float32))
        for i, p in enumerate(params):
            if holders[i] is not None:
                assert p.grad is holders[i]  # the layouts under test really are the grads that were unscaled
                grad_out[i].append(p.grad.detach().cpu().clone())
                if args.optimizer == "adamw_fused":
                    adam_step[i].append(opt.state[p]["step"].detach().cpu().clone())
            param_out[i].append(p.detach().cpu().clone())
        if step in MANUAL_UPDATES:
            kind, value = MANUAL_UPDATES[step]
            scaler.update(value if kind == "float" else torch.tensor(value, dtype=torch.float32, device=dev))
        else:
            scaler.update()
        rec["scale"].append(scaler._scale.detach().cpu().clone())
        rec["growth_tracker"].append(scaler._growth_tracker.detach().cpu().clone())

    manifest = [f"config optimizer {args.optimizer}", f"config device {dev.type}", f"config steps {steps}",
                f"config low_precision {low_name}", f"config explicit_unscale {int(explicit_ok)}"]
    manifest += [f"config {k} {v!r}" for k, v in CONFIG.items()]
    for name, dtype, layout, shape in params_spec:
        manifest.append(" ".join(["param", name, DTYPE_NAMES[dtype], layout] + [str(d) for d in shape]))
    manifest.append("unscale_steps " + " ".join(str(s) for s in range(steps) if is_explicit_unscale(s, explicit_ok)))
    for step, (kind, value) in sorted(MANUAL_UPDATES.items()):
        if step < steps:
            manifest.append(f"manual_update {step} {kind} {value!r}")
    for key, values in rec.items():
        write_array(args.out, manifest, key, torch.stack(values))
    for i, (name, dtype, layout, shape) in enumerate(params_spec):
        write_array(args.out, manifest, f"init.{name}", inits[i])
        write_array(args.out, manifest, f"param_out.{name}", torch.stack(param_out[i]))
        if layout != "nograd":
            write_array(args.out, manifest, f"grad_in.{name}", torch.stack([g[i] for g in grad_in]))
            write_array(args.out, manifest, f"grad_out.{name}", torch.stack(grad_out[i]))
            if args.optimizer == "adamw_fused":
                write_array(args.out, manifest, f"adam_step.{name}", torch.stack(adam_step[i]))
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")

    skipped = sum(1 for t in rec["found_inf"] if t.item() != 0)
    print(f"gradscaler_oracle: {args.optimizer} on {dev.type}: {steps} steps, {skipped} skipped, "
          f"final scale {scaler.get_scale()!r}, wrote {args.out}")


if __name__ == "__main__":
    main()
