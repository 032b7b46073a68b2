"""The sweep plan applied by each integration against the real transformers / lightning / accelerate (tiny GPT-2 of
hf_util on the CPU, nothing downloaded): the script unchanged, AMPCHECK_PLAN set; every run records the plan, the
planned precision (autocast_dtype, param_dtype, grad_scaler — what really ran: the recorder measures them), max_steps
steps, the skip run with its first step skipped and no false "skipped by the optimizer" warning, the seed run a
different first loss; the HF Trainer names a planted overflow's module."""

import os
import warnings

import pytest
import torch

import hf_util
import plan_util


def hf_script(out, plant=None):
    """A Trainer script as a user writes it (fp32, its own max_steps 40), recorded by AmpcheckCallback."""
    from transformers import Trainer, TrainingArguments

    from ampcheck.integrations.hf import AmpcheckCallback

    model = hf_util.model(1337)
    if plant:
        with torch.no_grad():
            model.get_submodule(plant).weight.mul_(1e6)
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer"),
        max_steps=40,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        lr_scheduler_type="constant",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=1337,
        disable_tqdm=True,
        logging_steps=1000,
    )
    cb = AmpcheckCallback(os.path.join(out, "script.h5"), overwrite=True)
    cb.train(Trainer(model=model, args=args, train_dataset=hf_util.Markov(512), callbacks=[cb]))


def lightning_script(out):
    import lightning.pytorch as pl

    from ampcheck.integrations.lightning import AmpcheckLightningCallback

    class LM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = hf_util.model(1337)

        def training_step(self, batch, i):
            return self.net(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.0)

    pl.seed_everything(1337, verbose=False)
    module = LM()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=40,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[AmpcheckLightningCallback(os.path.join(out, "script.h5"), overwrite=True)],
    )
    trainer.fit(module, torch.utils.data.DataLoader(hf_util.Markov(512), batch_size=8, shuffle=True))


def accelerate_script(out):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from ampcheck.integrations.accelerate import ampcheck_recorder

    AcceleratorState._reset_state(True)  # one Accelerator per run in one process (tests only)
    GradientState._reset_state()
    acc = Accelerator(cpu=True)
    torch.manual_seed(1337)
    model = hf_util.model(1337)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    data = torch.utils.data.DataLoader(hf_util.Markov(512), batch_size=8, shuffle=True)
    model, opt, data = acc.prepare(model, opt, data)
    with pytest.raises(SystemExit) as ended:  # a plain loop ends at the plan's max_steps
        with ampcheck_recorder(acc, os.path.join(out, "script.h5"), model, opt, overwrite=True) as rec:
            batches = iter(data)
            for _ in range(40):
                batch = next(batches)
                with acc.autocast():
                    loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
                acc.backward(loss)
                acc.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
                rec.step(loss)
    assert ended.value.code == 0


SCRIPTS = {"hf": hf_script, "lightning": lightning_script, "accelerate": accelerate_script}


@pytest.mark.parametrize("integration", list(SCRIPTS))
@pytest.mark.parametrize("run,strategy,fields", plan_util.RUNS, ids=[r[0] for r in plan_util.RUNS])
def test_integration_records_the_planned_run(tmp_path, monkeypatch, integration, run, strategy, fields):
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, run, strategy, **fields))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SCRIPTS[integration](d)
    assert not any("was skipped by the optimizer" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert not os.path.exists(os.path.join(d, "script.h5"))  # recorded at the plan's path only
    _, cols = plan_util.check_run(d, run, strategy, fields)
    if run == "fp32-seed":  # the seed offset reached the data order: another first loss than the fp32 run's
        monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp32", "fp32"))
        SCRIPTS[integration](d)
        _, base = plan_util.read(os.path.join(d, "runs", "fp32.h5"))
        assert base["loss"][0] != cols["loss"][0]


def test_hf_keep_fp32_and_a_planted_overflow(tmp_path, monkeypatch):
    d = str(tmp_path)
    plant = "transformer.h.0.mlp.c_fc"
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp16", "fp16-autocast-scaler"))
    hf_script(d, plant=plant)
    attrs, _ = plan_util.read(os.path.join(d, "runs", "fp16.h5"))
    assert (attrs["first_nonfinite_module"], attrs["first_nonfinite_pass"]) == (plant, "forward"), attrs
    # the localization probe: the planted module kept in FP32 overflows nothing
    monkeypatch.setenv(
        "AMPCHECK_PLAN",
        plan_util.write_plan(d, "probe-fp16-1", "fp16-autocast-scaler", keep_fp32=["transformer.h.0.mlp"]),
    )
    hf_script(d, plant=plant)
    attrs, cols = plan_util.read(os.path.join(d, "runs", "probe-fp16-1.h5"))
    assert "first_nonfinite_module" not in attrs and cols["skipped"].sum() == 0, attrs


def test_hf_outside_a_plan_skip_first_step_has_no_false_warning(tmp_path):
    from transformers import Trainer, TrainingArguments

    from ampcheck.integrations.hf import AmpcheckCallback

    args = TrainingArguments(
        output_dir=str(tmp_path / "t"),
        max_steps=4,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    cb = AmpcheckCallback(str(tmp_path / "skip.h5"), perturbation="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cb.train(Trainer(model=hf_util.model(), args=args, train_dataset=hf_util.Markov(256), callbacks=[cb]))
    assert not any("was skipped by the optimizer" in str(w.message) for w in caught)
    attrs, cols = plan_util.read(str(tmp_path / "skip.h5"))
    assert attrs["perturbation"] == "skip" and list(cols["skipped"]) == [1, 0, 0, 0]
