#!/usr/bin/env python3
"""The recorder's cost per training step, measured in one process: the same loop without the recorder and with it at
each probe setting, interleaved REPS times (drifts of the machine hit every case alike), the median time per step of
each compared with the median of the loop without it. Prints a markdown table (the one python/README.md, "Overhead",
states).

Loops:
  example   examples/pytorch/train_amp.py (its tiny model; fp16 autocast + GradScaler; CPU only)
  nanogpt   a nanoGPT-style plain loop over a GPT-2 (transformers' GPT2LMHeadModel from a config, nothing downloaded):
            autocast, GradScaler (fp16), fused AdamW, clip 1.0, the Recorder's step() once per step
  hf        the Hugging Face Trainer over the same GPT-2 with AmpcheckCallback
Sizes (nanogpt, hf): tiny (2 layers x 32, vocab 64, 32 tokens: the CPU), small (4 x 256, vocab 50257, 256 tokens),
gpt2 (GPT-2 124M: 12 x 768, vocab 50257, 1024 tokens). Cases: none (no recorder), default (the default probe
setting, probe_every=10), probe1 (probe_every=1), guard (nanogpt only: default plus the live guard, judge_every=50,
against a reference of the same loop's FP32 run and a seed run, made first). Time per step: from the end of the warm-up steps to the last step,
synchronized with the device at both ends (the flushes every 50 steps included; set-up and the final write not).

    python3 python/tools/overhead.py --device cpu --loops example nanogpt hf --sizes tiny > reports/python/overhead.md
    python3 python/tools/overhead.py --device cuda --loops nanogpt hf --sizes small gpt2 --dtype fp16
    python3 python/tools/overhead.py --device cuda --loops nanogpt --sizes gpt2 --dtype fp16 --cases none default guard
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import torch  # noqa: E402

from ampcheck import Recorder  # noqa: E402
from ampcheck.recorder import DEFAULT_PROBE_EVERY  # noqa: E402

SIZES = {  # n_layer, n_embd, n_head, vocab, tokens per sequence, batch
    "tiny": (2, 32, 2, 64, 32, 8),
    "small": (4, 256, 4, 50257, 256, 16),
    "gpt2": (12, 768, 12, 50257, 1024, 8),
}
CASES = {"none": None, "default": DEFAULT_PROBE_EVERY, "probe1": 1, "guard": DEFAULT_PROBE_EVERY}
GUARD_EVERY = 50  # case guard: the default recorder with the live guard, judge_every=50 (nanogpt loop only)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()  # sync point: the timing's ends only


def gpt2(size, device, seed=1):
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, embd, heads, vocab, seq, _ = SIZES[size]
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=seq,
        n_embd=embd,
        n_layer=layers,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg).to(device)


def batches(size, device, n):
    _, _, _, vocab, seq, batch = SIZES[size]
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (batch, seq), generator=g).to(device) for _ in range(n)]


def nanogpt_loop(size, device, dtype, steps, warm, probe_every, path, reference=None, seed=1, perturbation=None):
    """ms per step of the plain loop; probe_every None: no recorder; dtype fp32: no autocast, no scaler (the
    reference's runs); reference: the live guard on, judge_every=GUARD_EVERY."""
    model = gpt2(size, device, seed)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    scaler = torch.amp.GradScaler(device, enabled=dtype == "fp16")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
    data = batches(size, device, 8)
    guard = dict(reference=reference, judge_every=GUARD_EVERY) if reference else {}
    rec = (
        Recorder(path, model, opt, scaler, probe_every=probe_every, overwrite=True, perturbation=perturbation, **guard)
        if probe_every
        else None
    )
    t0 = None
    for step in range(warm + steps):
        if step == warm:
            sync(device)
            t0 = time.perf_counter()
        x = data[step % len(data)]
        with torch.autocast(device, dtype=amp_dtype, enabled=dtype != "fp32"):
            loss = model(input_ids=x, labels=x).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if rec is not None:
            rec.step(loss)
    sync(device)
    ms = (time.perf_counter() - t0) / steps * 1e3
    if rec is not None:
        rec.close()
        if rec.guard is not None:
            verdicts = [j.verdict for j in rec.guard.judgements]
            print(f"  guard: judgements {verdicts}, passed over {rec.guard.passed_over}", file=sys.stderr)
    return ms


def nanogpt_reference(size, device, steps, d, ext):
    """The guard case's reference: the loop in FP32 (seed 1) and a seed noise run (seed 2), `ampcheck reference`."""
    import ampcheck

    runs = [os.path.join(d, f"ref-fp32{ext}"), os.path.join(d, f"ref-seed{ext}")]
    nanogpt_loop(size, device, "fp32", steps, 0, DEFAULT_PROBE_EVERY, runs[0])
    nanogpt_loop(size, device, "fp32", steps, 0, DEFAULT_PROBE_EVERY, runs[1], seed=2, perturbation="seed")
    out = os.path.join(d, "reference.h5")
    ampcheck.make_reference(runs[0], spread=[f"seed:{runs[1]}"], out=out)
    return out


def hf_loop(size, device, dtype, steps, warm, probe_every, path):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from ampcheck.integrations.hf import AmpcheckCallback

    model = gpt2(size, device)
    data = batches(size, "cpu", 8)
    ds = [{"input_ids": x[i], "labels": x[i]} for x in data for i in range(x.shape[0])]
    batch = SIZES[size][5]
    times = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step in (warm, warm + steps):
                sync(device)
                times[state.global_step] = time.perf_counter()

    args = TrainingArguments(
        output_dir=os.path.join(os.path.dirname(path), "trainer"),
        max_steps=warm + steps,
        per_device_train_batch_size=batch,
        learning_rate=3e-4,
        lr_scheduler_type="constant",
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        use_cpu=device == "cpu",
        fp16=dtype == "fp16" and device == "cuda",
        bf16=dtype == "bf16",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callbacks = [Clock()]
    cb = None
    if probe_every:
        cb = AmpcheckCallback(path, probe_every=probe_every, overwrite=True)
        callbacks.insert(0, cb)
    trainer = Trainer(
        model=model, args=args, train_dataset=ds * (1 + (warm + steps) * batch // len(ds)), callbacks=callbacks
    )
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # the Trainer's metrics line
        (cb.train(trainer) if cb is not None else trainer.train())
    return (times[warm + steps] - times[warm]) / steps * 1e3


def example_loop(device, dtype, steps, warm, probe_every, path):
    import train_amp

    variant = {"fp16": "fp16-autocast-scaler", "bf16": "bf16-autocast"}[dtype]
    t0 = time.perf_counter()  # the whole loop (its set-up is a few ms)
    kw = dict(record=False) if not probe_every else dict(probe_every=probe_every)
    train_amp.train(variant, path, steps=steps, quiet=True, overwrite=True, **kw)
    return (time.perf_counter() - t0) / steps * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--loops", nargs="+", default=["example", "nanogpt", "hf"], choices=("example", "nanogpt", "hf"))
    ap.add_argument("--sizes", nargs="+", default=["tiny"], choices=tuple(SIZES))
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=tuple(CASES))
    ap.add_argument("--dtype", default="bf16", choices=("fp16", "bf16"))
    ap.add_argument("--steps", type=int, default=100, help="timed steps per run")
    ap.add_argument("--warm", type=int, default=10, help="steps before the timing starts")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore")
    try:
        import h5py  # noqa: F401

        ext = ".h5"
    except ImportError:  # (a machine without h5py: the recorder's JSON lines)
        ext = ".jsonl"
    d = tempfile.mkdtemp()
    rows = []
    for loop in a.loops:
        for size in ["tiny"] if loop == "example" else a.sizes:
            times = {c: [] for c in a.cases}
            reference = None
            if "guard" in a.cases:
                if loop != "nanogpt":
                    raise SystemExit("--cases guard: the nanogpt loop only")
                reference = nanogpt_reference(size, a.device, a.warm + a.steps, d, ext)
            for rep in range(-1, a.reps):  # rep -1: a warm-up round, not counted (first-run imports, allocator)
                for case in a.cases if rep >= 0 else a.cases[:1]:
                    path = os.path.join(d, f"{loop}-{size}-{case}{ext}")
                    if loop == "example":
                        ms = example_loop(a.device, a.dtype, a.steps, a.warm, CASES[case], path)
                    elif loop == "nanogpt":
                        ref = reference if case == "guard" else None
                        ms = nanogpt_loop(size, a.device, a.dtype, a.steps, a.warm, CASES[case], path, ref)
                    else:
                        ms = hf_loop(size, a.device, a.dtype, a.steps, a.warm, CASES[case], path)
                    if rep >= 0:
                        times[case].append(ms)
                    print(f"{loop} {size} {case} rep {rep}: {ms:.3f} ms/step", file=sys.stderr, flush=True)
            base = statistics.median(times[a.cases[0]])
            spread = (max(times[a.cases[0]]) - min(times[a.cases[0]])) / base
            for case in a.cases:
                m = statistics.median(times[case])
                rows.append(
                    f"| {loop} | {size if loop != 'example' else 'example'} | {case} | {m:.2f} | "
                    f"{(m / base - 1) * 100:+.1f}% | {spread * 100:.1f}% |"
                )
    dev = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    print(
        f"# Recorder overhead per step ({dev}, {a.dtype}, {a.steps} timed steps after {a.warm}, {a.reps} runs "
        f"each, interleaved; torch {torch.__version__})\n"
    )
    print(
        f"Command: `python3 python/tools/overhead.py {' '.join(sys.argv[1:])}`. default = probe_every="
        f"{DEFAULT_PROBE_EVERY} (the Recorder's and the integrations' default); guard = default with the live guard "
        f"(judge_every={GUARD_EVERY}, in the background, against an FP32 + seed reference of the same loop). Overhead: the case's median ms/step "
        f"against the no-recorder median of the same loop and size; spread: (max - min) / median of the no-recorder "
        f"runs, the noise floor.\n"
    )
    print("| loop | size | case | median ms / step | overhead | no-recorder spread |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
