"""The per-category GPU time of one training step (JSON lines of ampcheck_bench_train --profile and
bench/profile_step.py) as a Markdown table: one column per implementation, milliseconds per step."""
import json
import sys

rows = [json.loads(l) for p in sys.argv[1:] for l in open(p) if l.strip().startswith("{") and "kernel_ms" in l]
cats = []
for r in rows:
    for c in r["kernel_ms"]:
        if c not in cats:
            cats.append(c)
def label(r):
    opts = []
    if (r.get("cuda_graphs") or "").startswith("captured"):
        opts.append("graphs")
    if r.get("head_loss", "stock") != "stock":
        opts.append(r["head_loss"] + " head")
    if r.get("fused_layernorm"):
        opts.append("fused LN")
    if r.get("fused_bias_gelu"):
        opts.append("fused bias/GELU")
    if r.get("gemm_epilogues"):
        opts.append("GEMM epilogues")
    if r.get("fused_grad_check"):
        opts.append("fused grad check")
    if r.get("fused_param_norm"):
        opts.append("norms from AdamW")
    return f'{r["impl"]} {r["strategy"]}' + (f' ({" + ".join(opts)})' if opts else "")


head = [label(r) for r in rows]
print("| ms per step | " + " | ".join(head) + " |")
print("| --- |" + " --- |" * len(rows))
for c in cats:
    print(f"| {c} | " + " | ".join(f'{r["kernel_ms"].get(c, 0.0):.2f}' for r in rows) + " |")
print("| **GPU kernels (sum)** | " + " | ".join(f'{sum(r["kernel_ms"].values()):.2f}' for r in rows) + " |")
print("| GPU busy (union) | " + " | ".join(f'{r["busy_ms"]:.2f}' for r in rows) + " |")
print("| GPU idle in the step (host gaps) | " + " | ".join(f'{r["idle_ms"]:.2f}' for r in rows) + " |")
print("| **wall per step** | " + " | ".join(f'{r["wall_ms"]:.2f}' for r in rows) + " |")
print("| kernels per step | " + " | ".join(f'{r["kernels_per_step"]:.0f}' for r in rows) + " |")
print("| peak GiB | " + " | ".join(f'{r.get("peak_memory_gib", float("nan")):.1f}' for r in rows) + " |")
