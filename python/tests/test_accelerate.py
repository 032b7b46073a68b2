"""The Accelerate custom-loop helper against the real accelerate (pinned in pyproject.toml), on the tiny GPT-2 of
hf_util on the CPU, judged against an FP32 reference of the same loop. fp16 runs through accelerate's GradScaler path
by handing the Accelerator a CPU GradScaler before prepare (on a CPU, mixed_precision="fp16" alone trains FP32)."""

import os

import h5py
import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

import hf_util
from ampcheck.integrations.accelerate import ampcheck_recorder
from ampcheck.preflight import PreflightError


def run(
    out,
    name,
    *,
    steps=40,
    lr=3e-3,
    seed=1337,
    data_seed=11,
    mixed="no",
    cpu_scaler=False,
    half=False,
    inf_at=None,
    perturbation=None,
    bf16_pure=False,
):
    AcceleratorState._reset_state(True)  # one Accelerator per run in one process (tests only)
    GradientState._reset_state()
    acc = Accelerator(cpu=True, mixed_precision=mixed)
    if cpu_scaler:
        acc.scaler, acc.native_amp = torch.amp.GradScaler("cpu"), True
    model = hf_util.model(seed, torch.bfloat16 if bf16_pure else None)
    if half:
        model = model.half()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(data_seed)
    data = torch.utils.data.DataLoader(hf_util.Markov(), batch_size=8, shuffle=True, generator=g)
    model, opt, data = acc.prepare(model, opt, data)
    attrs = {"run_key": "accelerate-tiny-gpt2", "steps": steps}
    if perturbation:
        attrs["perturbation"] = perturbation
    with ampcheck_recorder(acc, os.path.join(out, name + ".h5"), model, opt, attributes=attrs, overwrite=True) as rec:
        it = iter(data)
        for step in range(steps):
            batch = next(it)
            with acc.autocast():
                loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            acc.backward(loss)
            if step == inf_at:
                acc.unwrap_model(model).transformer.h[0].mlp.c_fc.weight.grad.view(-1)[0] = float("inf")
            acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            rec.step(loss)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("accelerate"))
    hf_util.make_reference(d, run)
    return d


def test_bf16_tracks(out):
    run(out, "bf16", mixed="bf16")
    with h5py.File(f"{out}/bf16.h5") as f:
        assert f.attrs["autocast_dtype"] == "bfloat16" and f.attrs["optimizer_wrapper"] == "AcceleratedOptimizer"
    r, row = hf_util.judge(out, "bf16")
    assert row["verdict"] == "tracks", r.stdout


def test_fp16_through_the_grad_scaler_with_a_skipped_inf_tracks(out):
    run(out, "fp16-scaler", mixed="fp16", cpu_scaler=True, inf_at=5)
    with h5py.File(f"{out}/fp16-scaler.h5") as f:
        assert f.attrs["grad_scaler"] == "enabled" and f["steps/skipped"][5] == 1
    r, row = hf_util.judge(out, "fp16-scaler")
    assert row["verdict"] == "tracks", r.stdout


def test_half_model_with_grad_scaler_is_refused_before_training(out):
    with pytest.raises(PreflightError, match="Attempting to unscale FP16 gradients"):
        run(out, "half-scaler", mixed="fp16", cpu_scaler=True, half=True)
    with h5py.File(f"{out}/half-scaler.h5") as f:
        assert f.attrs["status"] == "error"


def test_pure_bf16_at_a_small_lr_is_caught(tmp_path):
    d = str(tmp_path)
    hf_util.make_reference(d, run, lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS)
    with pytest.warns(UserWarning, match="lost updates"):
        run(d, "bf16-pure", lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS, bf16_pure=True)
    r, row = hf_util.judge(d, "bf16-pure")
    assert row["verdict"] in ("stalls", "diverges"), r.stdout
