"""A tiny GPT-2 built from a config (nothing downloaded) on a synthetic Markov language, trained by the real Trainer."""

import json
import os
import subprocess

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from ampcheck.integrations.hf import AmpcheckCallback

VOCAB, SEQ = 64, 32
# The pure-bf16-at-lr-2e-5 tests' length: the lost updates show from step 0 (updates ~0.7x the FP32 reference's, the
# band ~0.88x..1.14x, at 30, 40 and 60 steps alike in the HF Trainer, Lightning and Accelerate runs), so 40 steps
# judge it as surely as 60 did, for two thirds of the training.
LOST_UPDATE_STEPS = 40


class Markov(torch.utils.data.Dataset):
    def __init__(self, n=4096, seed=7):
        g = torch.Generator().manual_seed(seed)
        succ = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
        toks = [0]
        for _ in range(n * 4):
            toks.append(int(succ[toks[-1], torch.randint(0, 4, (1,), generator=g)]))
        self.t = torch.tensor(toks)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.t[i : i + SEQ]
        return {"input_ids": x, "labels": x.clone()}


def model(seed=1337, dtype=None):
    torch.manual_seed(seed)
    m = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCAB,
            n_positions=SEQ,
            n_embd=32,
            n_layer=2,
            n_head=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    return m.to(dtype) if dtype is not None else m


def run(
    out,
    name,
    *,
    steps=40,
    lr=3e-3,
    seed=1337,
    data_seed=11,
    fp16=False,
    bf16=False,
    half=False,
    bf16_pure=False,
    cpu_scaler=False,
    inf_at=None,
    perturbation=None,
    expect="tracks",
    raises=False,
    record=True,
    probe_every=1,
    fail_at=None,
    blow_at=None,
    guard=None,
    device="cpu",
):
    """Trains and records runs/<name>.h5; cpu_scaler: give accelerate a CPU GradScaler and fp16 autocast (on a CPU it
    makes none: fp16=True alone trains FP32), so the Trainer's GradScaler path runs; inf_at: an inf written into one
    gradient after backward at that step (a scaler must skip it); blow_at: an fp16 blow-up planted at that step (the
    first MLP's weights multiplied by 1e6: its fp16 activations overflow from then on); guard: the live guard's
    arguments for the callback (reference=, judge_every=, stop_on=); device: cpu, or cuda (the Trainer's own fp16
    autocast and GradScaler there: cpu_scaler is not needed)."""
    m = model(seed, torch.bfloat16 if bf16_pure else None)
    if half:
        m = m.half()
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer-" + name),
        max_steps=steps,
        per_device_train_batch_size=8,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=device == "cpu",
        seed=seed,
        data_seed=data_seed,
        fp16=fp16,
        bf16=bf16,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    cb = AmpcheckCallback(
        os.path.join(out, name + ".h5"),
        attributes={"run_key": "hf-tiny-gpt2", "expect": expect, "steps": steps},
        overwrite=True,
        probe_every=probe_every,
        **(guard or {}),
    )
    if perturbation:
        cb.attributes["perturbation"] = perturbation
    trainer = Trainer(model=m, args=args, train_dataset=Markov(), callbacks=[cb] if record else [])
    if fail_at is not None:  # a forward that raises at that step (an error the Trainer has no callback event for)
        calls = {"n": 0}

        def fail(module, args):
            calls["n"] += 1
            if calls["n"] > fail_at:
                raise RuntimeError(f"planted failure in the forward of step {fail_at}")

        m.register_forward_pre_hook(fail)
    if cpu_scaler:
        trainer.accelerator.scaler = torch.amp.GradScaler("cpu")
        trainer.accelerator.native_amp = True
    if inf_at is not None:
        step = {"n": 0}
        p = dict(m.named_parameters())["transformer.h.0.mlp.c_fc.weight"]

        def plant(param):
            if step["n"] == inf_at:
                param.grad.view(-1)[0] = float("inf")

        p.register_post_accumulate_grad_hook(plant)

        class Count(TrainerCallback):
            def on_step_end(self, *a, **k):
                step["n"] += 1

        trainer.add_callback(Count())
    if blow_at is not None:

        class Blow(TrainerCallback):
            def on_step_begin(self, args, state, control, model=None, **k):
                if state.global_step == blow_at:
                    with torch.no_grad():
                        model.transformer.h[0].mlp.c_fc.weight.mul_(1e6)

        trainer.add_callback(Blow())
    if not record:
        trainer.train()
        return cb, "completed"
    try:
        cb.train(trainer)
    except Exception:
        if not raises:
            raise
        return cb, "raised"
    return cb, "completed"


def judge(out, name, summary=None):
    """`ampcheck judge OUT/NAME.h5 --reference OUT/reference.h5`: (the process, the summary's row)."""
    r = ampcheck("judge", f"{out}/{name}.h5", "--reference", f"{out}/reference.h5", "--out", f"{out}/j-{name}")
    with open(f"{out}/j-{name}/summary.json") as f:
        s = json.load(f)
    if summary is not None:
        summary.update(s)
    return r, s["scenarios"][0]


def make_reference(out, run_fn, **kw):
    """The FP32 run and its seed and data-order noise runs through `run_fn(out, name, ...)`, and OUT/reference.h5."""
    run_fn(out, "fp32", **kw)
    run_fn(out, "fp32-seed", seed=1338, perturbation="seed", **kw)
    run_fn(out, "fp32-order", data_seed=12, perturbation="order", **kw)
    r = ampcheck(
        "reference",
        f"{out}/fp32.h5",
        "--spread",
        f"{out}/fp32-seed.h5",
        f"{out}/fp32-order.h5",
        "--out",
        f"{out}/reference.h5",
    )
    assert r.returncode == 0, r.stdout


def ampcheck(*args):
    binary = os.environ.get("AMPCHECK_BIN", "ampcheck")
    return subprocess.run([binary] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
