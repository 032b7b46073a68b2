"""The Hugging Face Trainer integration against the real transformers / accelerate (the versions pyproject.toml pins),
on a tiny GPT-2 built from a config on the CPU: recorded by AmpcheckCallback, judged by `ampcheck judge` against an FP32
reference of the same Trainer (seed and data-order runs)."""

import h5py
import pytest
import torch

import hf_util


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("hf"))
    hf_util.make_reference(d, hf_util.run)
    return d


def test_bf16_autocast_tracks(out):
    hf_util.run(out, "bf16", bf16=True)
    with h5py.File(f"{out}/bf16.h5") as f:
        assert f.attrs["autocast_dtype"] == "bfloat16" and f.attrs["status"] == "completed"
        assert len(f["steps/loss"]) == 40 and "grad_norm" in f["steps"]
    s = {}
    r, row = hf_util.judge(out, "bf16", s)
    assert row["verdict"] == "tracks", r.stdout
    # the report uses what the run recorded: step times, tokens per step (the callback counts input_ids), versions
    assert row["median_step_ms"] > 0 and row["tokens_per_s"] > 0, row
    assert row["workload"] == "hf-tiny-gpt2" and row["compute_dtype"] == "bf16", row
    assert s["libtorch_version"] == torch.__version__.split("+")[0], s["libtorch_version"]
    with open(f"{out}/j-bf16/summary.md") as f:
        assert "LibTorch ," not in f.read()


def test_fp16_with_an_active_grad_scaler_and_a_skipped_inf_tracks(out):
    # the Trainer's default optimizer is fused AdamW: its skip is invisible to accelerate, whose LR scheduler advances
    with pytest.warns(UserWarning, match="LR scheduler advanced"):
        hf_util.run(out, "fp16-scaler", fp16=True, cpu_scaler=True, inf_at=5)
    with h5py.File(f"{out}/fp16-scaler.h5") as f:
        assert f.attrs["grad_scaler"] == "enabled" and f.attrs["autocast_dtype"] == "float16"
        skipped = f["steps/skipped"][:]
        assert skipped[5] == 1 and skipped.sum() >= 1, skipped
    r, row = hf_util.judge(out, "fp16-scaler")
    assert row["verdict"] == "tracks", r.stdout


def test_half_model_with_grad_scaler_is_caught_by_preflight_and_recorded(out):
    cb, how = hf_util.run(out, "half-scaler", fp16=True, cpu_scaler=True, half=True, raises=True)
    assert how == "raised"
    assert any(f.check == "fp16_params_with_scaler" for f in cb.findings)
    with h5py.File(f"{out}/half-scaler.h5") as f:
        assert f.attrs["status"] == "error"
        assert f.attrs["error"].startswith("Attempting to unscale FP16 gradients.")
    r, row = hf_util.judge(out, "half-scaler")
    assert row["verdict"] == "error" and not row["pass"], r.stdout


def test_fp16_on_a_cpu_without_a_scaler_is_named_not_in_effect(out):
    # accelerate on a CPU with fp16=True makes no scaler and no autocast: plain FP32, which the run must not claim
    hf_util.run(out, "fp16-cpu", fp16=True)
    with h5py.File(f"{out}/fp16-cpu.h5") as f:
        assert f.attrs["grad_scaler"] == "none" and f.attrs["autocast_dtype"] == "none"
    r, row = hf_util.judge(out, "fp16-cpu")
    assert any(w["signal"] == "precision" for w in row["warnings"]) or "precision" in r.stdout, r.stdout


def test_pure_bf16_at_a_small_lr_is_caught(out, tmp_path):
    # its own reference at the small lr (the same Trainer, FP32)
    d = str(tmp_path)
    hf_util.make_reference(d, hf_util.run, lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS)
    with pytest.warns(UserWarning, match="lost updates"):
        hf_util.run(d, "bf16-pure", lr=2e-5, steps=hf_util.LOST_UPDATE_STEPS, bf16_pure=True)
    r, row = hf_util.judge(d, "bf16-pure")
    assert row["verdict"] in ("stalls", "diverges"), r.stdout


def test_an_exception_that_ends_train_is_recorded_as_the_error_run(out):
    cb, how = hf_util.run(out, "fails", fail_at=3, raises=True)
    assert how == "raised"
    with h5py.File(f"{out}/fails.h5") as f:
        assert f.attrs["status"] == "error" and "planted failure in the forward of step 3" in f.attrs["error"]
        assert len(f["steps/loss"]) == 3
