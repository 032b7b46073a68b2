"""Preflight's fp16 checks on the tiny GPT-2 of hf_util: model.half() under AdamW without a scaler is flagged — and
the claim in the message holds (Adam's eps rounds to 0 in fp16: the loss NaN after the first step) —; the HF
Trainer's fp16=True on a CPU (nothing runs in fp16 there) is said to be not in effect, with no fp16 underflow warning."""

import os
import warnings

import torch

import hf_util
from ampcheck import preflight


def test_half_model_under_adamw_without_a_scaler_is_flagged_and_goes_nan():
    model = hf_util.model(1337).half()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    findings = preflight(model, opt, mixed_precision="fp16", warn=False)
    flagged = [f for f in findings if f.check == "adam_eps_below_fp16"]
    assert flagged and "eps 1e-08 is below fp16's smallest subnormal" in flagged[0].message, findings
    assert float(torch.tensor(1e-8, dtype=torch.float16)) == 0.0  # the rounding the message names
    batch = next(iter(torch.utils.data.DataLoader(hf_util.Markov(64), batch_size=8)))
    losses = []
    for _ in range(2):
        loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        losses.append(float(loss.detach()))
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert losses[0] == losses[0] and losses[1] != losses[1], losses  # finite, then NaN after one step
    nonfinite = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert len(nonfinite) >= 0.9 * len(list(model.named_parameters())), nonfinite
    # eps representable in fp16 (1e-4) is not flagged; fp32 parameters never are
    assert not any(
        f.check == "adam_eps_below_fp16"
        for f in preflight(model, torch.optim.AdamW(model.parameters(), eps=1e-4), warn=False)
    )
    fp32 = hf_util.model(1337)
    assert not any(
        f.check == "adam_eps_below_fp16" for f in preflight(fp32, torch.optim.AdamW(fp32.parameters()), warn=False)
    )


def test_hf_fp16_on_a_cpu_is_not_in_effect_and_warns_no_underflow(tmp_path):
    from transformers import Trainer, TrainingArguments

    from ampcheck.integrations.hf import AmpcheckCallback

    args = TrainingArguments(
        output_dir=str(tmp_path / "t"),
        max_steps=2,
        per_device_train_batch_size=8,
        fp16=True,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    cb = AmpcheckCallback(str(tmp_path / "fp16-cpu.h5"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cb.train(Trainer(model=hf_util.model(), args=args, train_dataset=hf_util.Markov(256), callbacks=[cb]))
    checks = {f.check for f in cb.findings}
    assert "mixed_not_in_effect" in checks and "fp16_without_scaler" not in checks, checks
    assert not any("flush to zero" in str(w.message) for w in caught)
    assert os.path.exists(tmp_path / "fp16-cpu.h5")
