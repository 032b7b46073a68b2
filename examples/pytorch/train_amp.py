#!/usr/bin/env python3
"""A PyTorch-Python training loop recorded with ampcheck's recorder and judged by `ampcheck judge`.

A small causal transformer (2 layers, width 64, ~0.1M parameters) learns a synthetic first-order Markov language
(no downloads) with AdamW, warmup + cosine, gradient clipping at 1.0 — the loop of the PyTorch AMP recipe. Each
run is one way to train it:

  fp32                   the FP32 run a reference is built from; fp32-ulp+1, fp32-ulp-1, fp32-seed, fp32-order,
                         fp32-skip: its noise runs (every initial weight one ulp up / down, init seed + 1, another
                         batch order, the first optimizer step not taken — as a GradScaler skips an overflowing step)
  fp16-autocast-scaler   correct: fp16 autocast over fp32 parameters + GradScaler, unscale_ before clipping
  bf16-autocast          correct: bf16 autocast, no scaler
  half-gradscaler        model.half() + GradScaler: PyTorch raises 'Attempting to unscale FP16 gradients.'
  clip-before-unscale    clip_grad_norm_ on the scaled grads, then scaler.step: the clip shrinks every step
  update-forgotten       scaler.update() never called: on the second step PyTorch raises
                         'unscale_() is being called after step().'

    python3 examples/pytorch/train_amp.py --out runs/                      # every run: runs/<run>.h5
    python3 examples/pytorch/train_amp.py --out runs/ fp32 fp32-seed fp16-autocast-scaler
    ampcheck reference runs/fp32.h5 --spread ulp:runs/fp32-ulp+1.h5 ulp:runs/fp32-ulp-1.h5 seed:runs/fp32-seed.h5 \\
        runs/fp32-order.h5 --out runs/reference.h5
    ampcheck judge runs/fp16-autocast-scaler.h5 --reference runs/reference.h5 --out report/

Every run expects to track (the attribute `expect`), as a team's CI would: `ampcheck judge` fails the ones it catches.
"""

import argparse
import contextlib
import functools
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # the installed package (pip install ./python), else the source tree's
    from ampcheck import Recorder, nudge_ulp
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src"))
    from ampcheck import Recorder, nudge_ulp  # noqa: E402

VARIANTS = ("fp32", "fp16-autocast-scaler", "bf16-autocast", "half-gradscaler", "clip-before-unscale",
            "update-forgotten")
NOISE = ("ulp+1", "ulp-1", "seed", "order", "skip")
RUNS = ("fp32",) + tuple(f"fp32-{n}" for n in NOISE) + VARIANTS[1:]
RUN_KEY = "example-tinylm-v1"


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=64, width=64, layers=2, heads=2, seq=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for m in self.modules():  # GPT-2's initialization
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


@functools.lru_cache(maxsize=None)
def markov_corpus(vocab, tokens, seed=7):
    """A first-order Markov source: each token has 4 likely successors."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.full((vocab, vocab), -4.0)
    for a in range(vocab):
        logits[a, torch.randperm(vocab, generator=g)[:4]] = torch.randn(4, generator=g) + 2.0
    probs = logits.softmax(-1)
    out = torch.empty(tokens, dtype=torch.long)
    out[0] = 0
    u = torch.rand(tokens, generator=g)
    cdf = probs.cumsum(-1)
    for i in range(1, tokens):
        out[i] = min(int(torch.searchsorted(cdf[out[i - 1]], u[i])), vocab - 1)
    return out


def lr_at(step, steps, lr, warmup=10, min_ratio=0.1):
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def train(variant, out_path, steps=100, batch=8, seq=32, lr=3e-3, noise=None, device="cpu", record=True,
          overwrite=False, expect="tracks", quiet=False, probe_every=1):
    """Train one variant and record it to out_path (record=False: the same loop without the recorder)."""
    seed = 1337 + (1 if noise == "seed" else 0)
    torch.manual_seed(seed)
    model = TinyLM(seq=seq).to(device)
    if noise in ("ulp+1", "ulp-1"):  # every initial weight one ulp away
        nudge_ulp(model, +1 if noise == "ulp+1" else -1)
    corpus = markov_corpus(64, 64 * 1024)
    order = torch.Generator().manual_seed(99 + (1 if noise == "order" else 0))
    fp16 = variant in ("fp16-autocast-scaler", "clip-before-unscale", "update-forgotten", "half-gradscaler")
    if variant == "half-gradscaler":
        model.half()  # THE BUG: no fp32 master weights; GradScaler refuses to unscale fp16 grads
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    scaler = torch.amp.GradScaler(device, enabled=fp16)
    autocast_dtype = {"fp32": None, "bf16-autocast": torch.bfloat16}.get(variant, torch.float16)
    if variant == "half-gradscaler":
        autocast_dtype = None
    attributes = {"strategy": variant if noise is None else f"fp32 ({noise})", "expect": expect,
                  "run_key": RUN_KEY, "dataset": "markov-64x65536-seed7", "steps": steps}
    # noise runs say what they are (`ampcheck reference` needs a seed or order run; ulp runs alone are refused)
    perturbation = None if noise is None else {"ulp+1": "ulp", "ulp-1": "ulp"}.get(noise, noise)
    rec = (Recorder(out_path, model, optimizer, scaler, attributes=attributes, overwrite=overwrite,
                    probe_every=probe_every, perturbation=perturbation) if record else None)
    try:
        with rec or contextlib.nullcontext():
            for step in range(steps):
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, steps, lr)
                starts = torch.randint(0, corpus.numel() - seq - 1, (batch,), generator=order)
                x = torch.stack([corpus[s:s + seq] for s in starts]).to(device)
                y = torch.stack([corpus[s + 1:s + seq + 1] for s in starts]).to(device)
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(device, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
                    loss = model(x, y)
                scaler.scale(loss).backward()  # the recorder reads the grads here, by backward hooks
                if variant != "clip-before-unscale":
                    scaler.unscale_(optimizer)  # (a no-op when the scaler is disabled)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not (noise == "skip" and step == 0):  # the skip noise run: step 0 not taken (recorded skipped)
                    scaler.step(optimizer)
                if variant != "update-forgotten":
                    scaler.update()
                if rec:
                    rec.step(loss)
                if not quiet and step % 20 == 0:
                    print(f"  {variant} step {step}: loss {loss.item():.4f}", flush=True)
    except Exception as e:  # the recorder has written it as an error run (status error, PyTorch's message)
        if not quiet:
            print(f"  {variant}: raised {type(e).__name__}: {e}")
        return "error"
    return "completed"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", metavar="RUN",
                    help=f"runs to train (default: all): {', '.join(RUNS)}")
    ap.add_argument("--out", required=True, help="an existing directory: one trajectory RUN.h5 per run")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--keep", action="store_true", help="skip runs whose file exists")
    ap.add_argument("--force", action="store_true", help="replace existing trajectory files")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    if not os.path.isdir(a.out):
        sys.exit(f"--out {a.out}: not a directory")
    for name in a.runs or RUNS:
        if name not in RUNS:
            sys.exit(f"{name}: not a run of this example (known: {', '.join(RUNS)})")
        path = os.path.join(a.out, name + ".h5")
        if a.keep and os.path.exists(path):
            print(f"{path}: kept")
            continue
        noise = name[len("fp32-"):] if name.startswith("fp32-") else None
        train("fp32" if noise else name, path, steps=a.steps, noise=noise, device=a.device, overwrite=a.force)


if __name__ == "__main__":
    main()
