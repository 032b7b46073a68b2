"""PyTorch-Python baseline for the throughput benchmark: a minimal GPT of exactly ampcheck's architecture
(pre-LayerNorm, SDPA causal attention, GELU(tanh) MLP, tied embeddings, GPT-2 init), fused AdamW, eager mode,
bf16 autocast or fp16 autocast + GradScaler. Same batch, FLOP convention and timing method as
ampcheck_bench_train (windows of steps, device-synchronised, median). Prints one JSON line.

    python3 bench/gpt_baseline.py --strategy bf16-autocast --batch 16 --seq 1024 --steps 30
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # n_layer, n_head, n_embd, block_size, vocab
    "nano": (4, 4, 128, 64, 256),
    "mini": (6, 6, 384, 256, 4096),
    "gpt2-124m": (12, 12, 768, 1024, 50304),
}


class Block(nn.Module):
    def __init__(self, n_head, C):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(H, C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def training_step(preset, strategy, batch, seq=0, compile=False, dev="cuda"):
    """The baseline's model and one training step of it (autocast, GradScaler for fp16, fused AdamW, random windows of
    a token stream), shared by this benchmark and bench/profile_step.py. Returns (model, step, T); step(i) -> loss."""
    L, H, C, T, V = PRESETS[preset]
    T = seq or T
    torch.manual_seed(1337)
    model = GPT(L, H, C, T, V).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    dtype = torch.bfloat16 if strategy == "bf16-autocast" else torch.float16
    scaler = torch.amp.GradScaler(dev, enabled=dtype == torch.float16)
    fwd = torch.compile(model) if compile else model
    data = torch.randint(V, (1 << 22,), device=dev)

    def step(i=0):
        off = torch.randint(len(data) - T - 1, (batch,), device=dev)
        idx = off[:, None] + torch.arange(T + 1, device=dev)
        w = data[idx]
        with torch.autocast(dev, dtype=dtype):
            loss = fwd(w[:, :-1], w[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, step, T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--strategy", default="bf16-autocast", choices=["bf16-autocast", "fp16-autocast"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--warmup-seconds", type=float, default=0.0,
                    help="after the warm-up steps, keep training until this much time has passed (steady clocks)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode); warm-up compiles")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run: CTest unit.bench_tables)")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, step, T = training_step(a.preset, a.strategy, a.batch, a.seq, a.compile, dev=a.device)
    L, _, C, _, _ = PRESETS[a.preset]
    for i in range(a.warmup):
        step(i)
    sync()
    w0 = time.perf_counter()
    while time.perf_counter() - w0 < a.warmup_seconds:  # as ampcheck_bench_train --warmup-seconds
        for i in range(a.window):
            step(i)
        sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    windows = []
    for s in range(0, a.steps, a.window):
        n = min(a.window, a.steps - s)
        sync()
        t0 = time.perf_counter()
        for i in range(n):
            loss = step(i)
        sync()
        windows.append((time.perf_counter() - t0) * 1000 / n)
    in_order = list(windows)
    windows.sort()
    med = windows[len(windows) // 2]
    n_params = sum(p.numel() for p in model.parameters())
    tok_s = a.batch * T / (med / 1000)
    # the harness's Model::training_flops_per_token: 6 per matmul weight (the position embedding is a lookup)
    flops_per_token = 6 * (n_params - model.wpe.weight.numel()) + 12 * L * C * T
    print(json.dumps({"impl": "pytorch-python-compile" if a.compile else "pytorch-python-eager", "preset": a.preset, "strategy": a.strategy,
                      "device": torch.cuda.get_device_name() if cuda else "cpu", "batch": a.batch, "seq": T, "params": n_params,
                      "steps": a.steps, "warmup_steps": a.warmup, "warmup_seconds": a.warmup_seconds, "median_step_ms": med, "min_step_ms": windows[0], "max_step_ms": windows[-1], "window": a.window, "windows_ms": in_order, "ended_unix_s": time.time(),
                      "tokens_per_s": tok_s, "tflops": tok_s * flops_per_token / 1e12,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
                      "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
