"""The Lightning integration against the real lightning (the version pyproject.toml pins), on the tiny GPT-2 of
hf_util on the CPU: recorded by AmpcheckLightningCallback, judged by `ampcheck judge` against an FP32 reference of the
same Lightning loop (seed and data-order runs). fp16 runs through Lightning's GradScaler path by handing its
MixedPrecision plugin a CPU GradScaler (on a CPU `precision="16-mixed"` alone becomes bf16-mixed)."""

import os

import h5py
import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.plugins.precision import MixedPrecision  # noqa: E402

import hf_util  # noqa: E402
from ampcheck.integrations.lightning import AmpcheckLightningCallback  # noqa: E402


class LM(pl.LightningModule):
    def __init__(self, seed, lr, dtype=None, half=False):
        super().__init__()
        self.net = hf_util.model(seed, dtype)
        if half:
            self.net = self.net.half()
        self.lr = lr

    def training_step(self, batch, i):
        return self.net(input_ids=batch["input_ids"], labels=batch["labels"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, betas=(0.9, 0.999), weight_decay=0.0)


def run(
    out,
    name,
    *,
    steps=40,
    lr=3e-3,
    seed=1337,
    data_seed=11,
    precision="32-true",
    fp16_scaler=False,
    half=False,
    dtype=None,
    inf_at=None,
    perturbation=None,
    raises=False,
):
    torch.manual_seed(seed)
    module = LM(seed, lr, dtype, half)
    attrs = {"run_key": "lightning-tiny-gpt2", "steps": steps, "expect": "tracks"}
    if perturbation:
        attrs["perturbation"] = perturbation
    cb = AmpcheckLightningCallback(os.path.join(out, name + ".h5"), attributes=attrs, overwrite=True)
    plugins = [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))] if fp16_scaler else []
    kw = {} if fp16_scaler else {"precision": precision}
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[cb],
        plugins=plugins,
        **kw,
    )
    if inf_at is not None:
        p = dict(module.named_parameters())["net.transformer.h.0.mlp.c_fc.weight"]
        p.register_post_accumulate_grad_hook(
            lambda param: param.grad.view(-1).__setitem__(0, float("inf")) if trainer.global_step == inf_at else None
        )
    g = torch.Generator().manual_seed(data_seed)
    data = torch.utils.data.DataLoader(hf_util.Markov(), batch_size=8, shuffle=True, generator=g)
    try:
        trainer.fit(module, data)
    except Exception:
        if not raises:
            raise
        return cb, "raised"
    return cb, "completed"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("lightning"))
    hf_util.make_reference(d, run)
    return d


def test_bf16_mixed_tracks(out):
    run(out, "bf16", precision="bf16-mixed")
    with h5py.File(f"{out}/bf16.h5") as f:
        assert f.attrs["autocast_dtype"] == "bfloat16" and len(f["steps/loss"]) == 40
    r, row = hf_util.judge(out, "bf16")
    assert row["verdict"] == "tracks", r.stdout


def test_16_mixed_with_the_plugins_grad_scaler_and_a_skipped_inf_tracks(out):
    run(out, "fp16-scaler", fp16_scaler=True, inf_at=5)
    with h5py.File(f"{out}/fp16-scaler.h5") as f:
        assert f.attrs["grad_scaler"] == "enabled" and f.attrs["autocast_dtype"] == "float16"
        assert f["steps/skipped"][5] == 1, f["steps/skipped"][:10]
    r, row = hf_util.judge(out, "fp16-scaler")
    assert row["verdict"] == "tracks", r.stdout


def test_half_model_with_grad_scaler_is_caught_by_preflight(out):
    cb, how = run(out, "half-scaler", fp16_scaler=True, half=True, raises=True)
    assert how == "raised" and any(f.check == "fp16_params_with_scaler" for f in cb.findings)
    with h5py.File(f"{out}/half-scaler.h5") as f:
        assert f.attrs["status"] == "error" and f.attrs["error"].startswith("Attempting to unscale FP16 gradients.")


def test_pure_bf16_at_a_small_lr_is_caught(tmp_path):
    d = str(tmp_path)
    hf_util.make_reference(d, run, lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS)
    with pytest.warns(UserWarning, match="lost updates"):
        run(d, "bf16-true", lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS, precision="bf16-true")
    r, row = hf_util.judge(d, "bf16-true")
    assert row["verdict"] in ("stalls", "diverges"), r.stdout
