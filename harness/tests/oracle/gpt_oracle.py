"""Reference forward/backward for ampcheck's GPT, written independently in PyTorch with explicit attention
(softmax(QK^T / sqrt(D)) with a causal mask, not scaled_dot_product_attention) and float64 arithmetic.

Reads an ampcheck checkpoint file (AMPCKPT1: magic, uint64 header length, JSON header, raw tensors) holding the
model's parameters as "model/<name>" plus "inputs" and "targets" (B, T) int64 and the config in meta; writes one
with "loss" and "grad/<name>" in float64. Usage: gpt_oracle.py IN OUT
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64}


def read(path):
    b = open(path, "rb").read()
    assert b[:8] == b"AMPCKPT1", path
    (hlen,) = struct.unpack("<Q", b[8:16])
    header = json.loads(b[16:16 + hlen])
    base = 16 + hlen
    out = {}
    for t in header["tensors"]:
        a = np.frombuffer(b, dtype=DTYPES[t["dtype"]], count=int(np.prod(t["shape"], dtype=np.int64)),
                          offset=base + t["offset"]).reshape(t["shape"])
        out[t["name"]] = torch.from_numpy(a.copy())
    return header["meta"], out


def write(path, meta, tensors):
    payload, entries = b"", []
    for name, t in tensors.items():
        a = t.detach().contiguous().numpy()
        entries.append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "offset": len(payload),
                        "nbytes": a.nbytes})
        payload += a.tobytes()
    h = json.dumps({"format": "ampcheck-checkpoint", "version": 1, "meta": meta, "tensors": entries}).encode()
    open(path, "wb").write(b"AMPCKPT1" + struct.pack("<Q", len(h)) + h + payload)


def main():
    meta, t = read(sys.argv[1])
    L, H, C = meta["n_layer"], meta["n_head"], meta["n_embd"]
    p = {k[6:]: v.double().requires_grad_(True) for k, v in t.items() if k.startswith("model/")}
    idx, tgt = t["inputs"], t["targets"]
    B, T = idx.shape
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        g = lambda n: p[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"))
        q, k, v = (h @ g("attn.c_attn.weight").T + g("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight").T + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"))
        h = F.gelu(h @ g("mlp.c_fc.weight").T + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight").T + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"])
    logits = x @ p["wte"].T
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
    loss.backward()
    out = {"loss": loss.detach().reshape(())}
    out.update({"grad/" + n: v.grad for n, v in p.items()})
    write(sys.argv[2], {"torch": torch.__version__}, out)


if __name__ == "__main__":
    main()
