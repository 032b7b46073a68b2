"""A plain loop for the live guard's tests: a small MLP classifier (fixed teacher labels, CPU, fp32 or fp16 autocast
with a CPU GradScaler) recorded by the Recorder; a planted fp16 blow-up (the first layer's weights multiplied by 1e6 at
a given step: its fp16 activations overflow, the loss goes non-finite and stays so, every later step skipped); a planted divergence with a finite loss (the learning rate multiplied at a given step)."""

import os
import subprocess

import torch

from ampcheck import Recorder

FEATURES, CLASSES, SAMPLES, BATCH = 16, 8, 512, 32
LR_JUMP = 100.0


def data(seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    return x, (x @ teacher).argmax(1)


def train(
    path,
    steps,
    *,
    seed=0,
    data_seed=1,
    fp16=False,
    blow_at=None,
    lr_jump_at=None,
    perturbation=None,
    hidden=64,
    attributes_extra=None,
    **recorder_kw,
):
    """Train `steps` steps recorded at `path`; returns the Recorder (GuardStop propagates). hidden: the MLP's width
    (another width: another model); attributes_extra: more recorder attributes (run_key, ...)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    x, y = data()
    order = torch.Generator().manual_seed(data_seed)
    attrs = {"run_key": "guard-mlp", "strategy": "fp16-autocast-scaler" if fp16 else "fp32"}
    if perturbation:
        attrs["perturbation"] = perturbation
    attrs.update(attributes_extra or {})
    with Recorder(path, model, opt, scaler if fp16 else None, attributes=attrs, overwrite=True, **recorder_kw) as rec:
        for step in range(steps):
            if step == blow_at:
                with torch.no_grad():
                    model[0].weight.mul_(1e6)  # the planted blow-up: fp16 activations overflow from here on
            if step == lr_jump_at:
                for group in opt.param_groups:
                    group["lr"] *= LR_JUMP  # the planted divergence: the loss leaves the reference, finite
            idx = torch.randint(0, SAMPLES, (BATCH,), generator=order)
            with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
                loss = torch.nn.functional.cross_entropy(model(x[idx]).float(), y[idx])
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            rec.step(loss)
    return rec


def ampcheck(*args):
    binary = os.environ.get("AMPCHECK_BIN", "ampcheck")
    return subprocess.run([binary] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def make_reference(out, steps, seed=0, data_seed=1, name="reference"):
    """OUT/NAME.h5 from the FP32 loop (seed, data_seed) and its seed and data-order noise runs."""
    train(f"{out}/{name}-fp32.h5", steps, seed=seed, data_seed=data_seed)
    train(f"{out}/{name}-seed.h5", steps, seed=seed + 1, data_seed=data_seed, perturbation="seed")
    train(f"{out}/{name}-order.h5", steps, seed=seed, data_seed=data_seed + 1, perturbation="order")
    r = ampcheck(
        "reference",
        f"{out}/{name}-fp32.h5",
        "--spread",
        f"{out}/{name}-seed.h5",
        f"{out}/{name}-order.h5",
        "--out",
        f"{out}/{name}.h5",
    )
    assert r.returncode == 0, r.stdout
    return f"{out}/{name}.h5"
