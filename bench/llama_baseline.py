"""PyTorch-Python baseline for the Llama throughput benchmark: the engine's Llama architecture written plainly in
PyTorch (RMSNorm with its variance in fp32, RoPE angles in fp32, GQA by repeat_kv, SDPA causal attention, SwiGLU,
untied head, HF's N(0, 0.02) init) — or, with --hf, transformers' own LlamaForCausalLM (sdpa attention) of the same
config — trained with fused AdamW, eager or torch.compile, under bf16 autocast or fp16 autocast + GradScaler. Same
batch, FLOP convention (6 per matmul weight + 12·L·C·T) and timing method (windows of steps, device-synchronised,
median) as ampcheck_bench_train --model llama. Prints one JSON line.

    python3 bench/llama_baseline.py --preset llama-150m --strategy bf16-autocast --batch 8 --seq 1024 --compile
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # n_layer, n_head, n_kv_head, n_embd, mlp_hidden, block_size, vocab (harness/models/llama.cpp's)
    "llama-micro": (2, 4, 2, 64, 176, 64, 256),
    "llama-nano": (4, 8, 4, 128, 352, 128, 512),
    "llama-150m": (16, 12, 4, 768, 2048, 1024, 32768),
}
THETA, EPS = 10000.0, 1e-5


class RMSNorm(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, H, K, C, I):
        super().__init__()
        self.H, self.K, self.D = H, K, C // H
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(C), RMSNorm(C)
        self.q_proj = nn.Linear(C, H * self.D, bias=False)
        self.k_proj = nn.Linear(C, K * self.D, bias=False)
        self.v_proj = nn.Linear(C, K * self.D, bias=False)
        self.o_proj = nn.Linear(H * self.D, C, bias=False)
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.K, self.D).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.K, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.H // self.K
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, C))
        m = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class Llama(nn.Module):
    def __init__(self, L, H, K, C, I, V):
        super().__init__()
        self.D = C // H
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Block(H, K, C, I) for _ in range(L))
        self.norm = RMSNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        with torch.autocast(idx.device.type, enabled=False):  # the angles in fp32
            inv_freq = 1.0 / THETA ** (torch.arange(0, self.D, 2, device=idx.device, dtype=torch.float) / self.D)
            freqs = torch.outer(torch.arange(T, device=idx.device, dtype=torch.float), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for b in self.layers:
            x = b(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def hf_llama(L, H, K, C, I, T, V):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=H,
                      num_key_value_heads=K, max_position_embeddings=T, rms_norm_eps=EPS,
                      rope_parameters={"rope_type": "default", "rope_theta": THETA}, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, idx, targets):
            logits = self.m(input_ids=idx).logits
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    return Wrapped()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama-150m", choices=sorted(PRESETS))
    ap.add_argument("--strategy", default="bf16-autocast", choices=["bf16-autocast", "fp16-autocast"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode); warm-up compiles")
    ap.add_argument("--hf", action="store_true", help="transformers' LlamaForCausalLM instead of the plain model")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    L, H, K, C, I, T, V = PRESETS[a.preset]
    T = a.seq or T
    torch.manual_seed(1337)
    model = (hf_llama(L, H, K, C, I, T, V) if a.hf else Llama(L, H, K, C, I, V)).to(a.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    dtype = torch.bfloat16 if a.strategy == "bf16-autocast" else torch.float16
    scaler = torch.amp.GradScaler(a.device, enabled=dtype == torch.float16)
    fwd = torch.compile(model) if a.compile else model
    data = torch.randint(V, (1 << 22,), device=a.device)

    def step():
        off = torch.randint(len(data) - T - 1, (a.batch,), device=a.device)
        w = data[off[:, None] + torch.arange(T + 1, device=a.device)]
        with torch.autocast(a.device, dtype=dtype):
            loss = fwd(w[:, :-1], w[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    windows = []
    for s in range(0, a.steps, a.window):
        n = min(a.window, a.steps - s)
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            loss = step()
        sync()
        windows.append((time.perf_counter() - t0) * 1000 / n)
    in_order = list(windows)
    windows.sort()
    med = windows[len(windows) // 2]
    n_params = sum(p.numel() for p in model.parameters())
    embed = V * C  # the token embedding is a lookup (the head is its own weight: untied)
    tok_s = a.batch * T / (med / 1000)
    flops_per_token = 6 * (n_params - embed) + 12 * L * C * T
    impl = ("hf-" if a.hf else "pytorch-python-") + ("compile" if a.compile else "eager")
    print(json.dumps({"impl": impl, "preset": a.preset, "strategy": a.strategy,
                      "device": torch.cuda.get_device_name() if cuda else "cpu", "batch": a.batch, "seq": T,
                      "params": n_params, "steps": a.steps, "warmup_steps": a.warmup, "median_step_ms": med,
                      "windows_ms": in_order, "tokens_per_s": tok_s, "tflops": tok_s * flops_per_token / 1e12,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
                      "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
