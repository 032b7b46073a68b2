"""Tabulates the JSON lines of ampcheck_bench_train and gpt_baseline.py (read from the files given) as Markdown:
tokens/s, TFLOP/s, peak memory, and the ratio of ampcheck's tokens/s to the Python baseline's for the same
strategy measured in the same run."""
import json
import sys

rows = []
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))

rows = [r for r in rows if "tokens_per_s" in r]  # (the FP8 breakdown line is not a throughput row)
base = {r["strategy"]: r for r in rows if r["impl"] == "pytorch-python-eager"}
compiled = {r["strategy"]: r for r in rows if r["impl"] == "pytorch-python-compile"}
engine_bf16 = {r.get("probe_every"): r for r in rows if r["impl"] == "ampcheck-cpp" and r["strategy"] == "bf16-autocast"
               and r.get("head_loss", "stock") == "stock" and not r.get("cuda_graphs")
               and not r.get("fused_layernorm") and not r.get("fused_bias_gelu")
               and not r.get("gemm_epilogues") and not r.get("fused_grad_check")}


def engine_path(r):
    """What the engine ran: stock, or its options (CUDA graphs, a fused or chunked head)."""
    if r["impl"] != "ampcheck-cpp":
        return "-"
    parts = []
    g = r.get("cuda_graphs") or ""
    if g.startswith("captured"):
        parts.append("graphs")
    elif g:
        parts.append("graphs refused")
    if r.get("head_loss", "stock") != "stock":
        parts.append(r["head_loss"] + " head")
    if r.get("fused_layernorm"):
        parts.append("fused LN")
    if r.get("fused_bias_gelu"):
        parts.append("fused bias/GELU")
    if r.get("gemm_epilogues"):
        parts.append("GEMM epilogues")
    if r.get("fused_grad_check"):
        parts.append("fused grad check")
    return " + ".join(parts) or "stock"


def windows(r):
    """The timed windows' ms per step in the order they ran (older rows: min-max)."""
    if r.get("windows_ms"):
        return " ".join(f"{w:.2f}" for w in r["windows_ms"])
    return f'{r["min_step_ms"]:.2f}-{r["max_step_ms"]:.2f}'


print("| implementation | engine path | strategy | full probes | tokens/s | TFLOP/s | MFU | median ms/step (windows) | peak GiB "
      "| vs Python eager | vs torch.compile | vs engine bf16 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
PEAK_TFLOPS = {"bf16-autocast": 989.0, "fp16-autocast": 989.0, "fp8": 989.0}  # H200 dense bf16/fp16 spec (MFU vs bf16)
for r in rows:
    b = base.get(r["strategy"])
    ratio = f'{r["tokens_per_s"] / b["tokens_per_s"]:.3f}' if b else "-"
    e = engine_bf16.get(r.get("probe_every")) if r["impl"] == "ampcheck-cpp" else None
    vs_bf16 = f'{r["tokens_per_s"] / e["tokens_per_s"]:.3f}' if e else "-"
    pe = r.get("probe_every")
    probes = "-" if pe is None else ("never" if pe == 0 else "every step" if pe == 1 else f"every {pe}")
    c = compiled.get(r["strategy"])
    vs_c = f'{r["tokens_per_s"] / c["tokens_per_s"]:.3f}' if c else "-"
    mfu = r["tflops"] / PEAK_TFLOPS.get(r["strategy"], 989.0)
    print(f'| {r["impl"]} | {engine_path(r)} | {r["strategy"]} | {probes} | {r["tokens_per_s"] / 1e3:.1f}k | {r["tflops"]:.0f} | {mfu:.0%} | '
          f'{r["median_step_ms"]:.2f} ({windows(r)}) | {r["peak_memory_gib"]:.1f} | {ratio} | {vs_c} | {vs_bf16} |')
if rows:
    r = rows[0]
    print(f'\n{r["device"]}, {r["preset"]} ({r["params"] / 1e6:.1f}M params), batch {r["batch"]} x {r["seq"]} tokens. '
          "MFU: model TFLOP/s over the H200's dense bf16 peak of 989 TFLOP/s (fp8 runs too, so their MFU compares with bf16).")
    ws = {x.get("warmup_seconds") for x in rows if x.get("warmup_seconds")}
    if ws:
        print(f"Each run trained {', '.join(f'{w:g}' for w in sorted(ws))} s past its warm-up steps before the timed windows "
              "(--warmup-seconds: the GPU's clocks and temperature under the step's load).")
