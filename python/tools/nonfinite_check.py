#!/usr/bin/env python3
"""The first non-finite operation on a device (issue 52): what the Recorder's trace (python/src/ampcheck/nonfinite.py,
nonfinite_ops.py) names for planted overflows, and what tracking costs a healthy run. Written for CUDA, where the
trace reads its indices through pinned buffers and SDPA has four backends; runs on a CPU too.

Cases (each a plain loop: fp16 autocast, a GradScaler at 65536, SGD, the Recorder with track_nonfinite=True):
  forward   a Linear's weights x 1e6 (no longer fits fp16: autocast's cast overflows before the matmul)
  sdpa      an attention whose keys are x 1e4 and queries x 1e-4 (the logits unchanged): the forward is finite, the
            backward of scaled_dot_product_attention overflows — replayed per backend
  llama     a tiny transformers Llama (sdpa attention), layer 0's k_proj x 1e4 and q_proj x 1e-4, loss computed by the
            model from its labels (x 1 and x 10)
Cost: a healthy 6-layer transformers GPT-2 (fp16 autocast + GradScaler, 50 steps), the Recorder with and without
track_nonfinite, interleaved (3 pairs): ms/step (median after 10 steps) and the ratio.

    python3 python/tools/nonfinite_check.py --device cuda --out /tmp/nonfinite   # writes nonfinite.md there
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import h5py  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ampcheck import Recorder  # noqa: E402


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = [t.view(4, 16, 4, 8).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x))]
        return F.scaled_dot_product_attention(*heads, is_causal=True)


def train(model, loss_of, device: str, steps: int, track: bool, path: str) -> tuple[dict, list[float]]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**16)
    times = []
    with Recorder(path, model, opt, scaler, overwrite=True, track_nonfinite=track) as rec:
        for _ in range(steps):
            t0 = time.perf_counter()
            with torch.autocast(device, dtype=torch.float16):
                loss = loss_of(model)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            rec.step(loss)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    with h5py.File(path) as f:
        attrs = {k: str(f.attrs[k]) for k in f.attrs if k.startswith("first_nonfinite")}
    return attrs, times


def case_forward(device: str, d: str) -> dict:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)).to(device)
    with torch.no_grad():
        m[0].weight.mul_(1e6)
    x, y = torch.randn(128, 64, device=device), torch.randn(128, 8, device=device)
    return train(m, lambda mm: F.mse_loss(mm(x).float(), y), device, 8, True, os.path.join(d, "forward.h5"))[0]


def case_sdpa(device: str, d: str, loss_scale: float) -> dict:
    torch.manual_seed(0)
    m = Attention().to(device)
    with torch.no_grad():
        m.k.weight.mul_(1e4)
        m.q.weight.mul_(1e-4)
    x = torch.randn(4, 16, 32, device=device)
    return train(m, lambda mm: (mm(x).float() ** 2).mean() * loss_scale, device, 8, True, os.path.join(d, "sdpa.h5"))[0]


def case_llama(device: str, d: str, loss_scale: float) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    cfg._attn_implementation = "sdpa"
    m = LlamaForCausalLM(cfg).to(device)
    with torch.no_grad():
        m.model.layers[0].self_attn.k_proj.weight.mul_(1e4)
        m.model.layers[0].self_attn.q_proj.weight.mul_(1e-4)
    ids = torch.randint(0, 256, (8, 32), device=device)
    return train(
        m, lambda mm: mm(input_ids=ids, labels=ids).loss * loss_scale, device, 8, True, os.path.join(d, "llama.h5")
    )[0]


def cost(device: str, d: str, pairs: int, steps: int) -> list[tuple[float, float]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    out = []
    for i in range(pairs):
        row = []
        for track in (False, True):
            torch.manual_seed(0)
            cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=8192, n_positions=256)
            m = GPT2LMHeadModel(cfg).to(device)
            ids = torch.randint(0, 8192, (16, 256), device=device)
            _, t = train(
                m,
                lambda mm, ids=ids: mm(input_ids=ids, labels=ids).loss,
                device,
                steps,
                track,
                os.path.join(d, f"cost-{i}-{track}.h5"),
            )
            row.append(statistics.median(t[10:]))
        out.append((row[0], row[1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--parts", default="cases,cost", help="which parts run: cases (the plants), cost")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    lines = [f"# The first non-finite operation on {name} (torch {torch.__version__})", ""]
    with tempfile.TemporaryDirectory() as d:
        cases = [("forward: Linear weights x 1e6", lambda: case_forward(a.device, d))]
        for k in (100.0, 1000.0):
            cases.append((f"sdpa: keys x 1e4, queries x 1e-4, loss x {k:g}", lambda k=k: case_sdpa(a.device, d, k)))
        for k in (1.0, 10.0):
            cases.append(
                (f"llama: layer 0 k_proj x 1e4, q_proj x 1e-4, loss x {k:g}", lambda k=k: case_llama(a.device, d, k))
            )
        for title, run in cases if "cases" in a.parts.split(",") else []:
            try:
                attrs = run()
            except Exception as e:  # a case that cannot run here is said so, not hidden
                attrs = {"error": f"{type(e).__name__}: {e}"}
            lines += [f"## {title}", ""] + [f"- `{k}`: {v}" for k, v in attrs.items()] + [""]
            print(lines[-len(attrs) - 2 :], flush=True)
        pairs = cost(a.device, d, a.pairs, a.steps) if "cost" in a.parts.split(",") else []
    ratios = [t / n for n, t in pairs] or [float("nan")]
    lines += [
        f"## Cost on a healthy run (transformers GPT-2, 6 layers x 512, batch 16 x 256, fp16 + GradScaler, "
        f"{a.steps} steps, median ms/step after 10; interleaved pairs)",
        "",
        "| pair | no tracking ms/step | track_nonfinite ms/step | ratio |",
        "|---|---|---|---|",
    ]
    lines += [f"| {i + 1} | {n:.2f} | {t:.2f} | {t / n:.3f} |" for i, (n, t) in enumerate(pairs)]
    lines += ["", f"median ratio {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})", ""]
    with open(os.path.join(a.out, "nonfinite.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
