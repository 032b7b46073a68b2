"""Tabulates the JSON lines of ampcheck_bench_train and gpt_baseline.py (read from the files given) as Markdown:
tokens/s, TFLOP/s, peak memory, and the ratio of ampcheck's tokens/s to the Python baseline's for the same
strategy measured in the same run: the Python eager / torch.compile row of that strategy last read before the row
(in file order; ci/gpu.sh's BENCH_ROUNDS repeats compile and the engine, so each round's engine rows meet that
round's torch.compile), else the last one in the files.

    python3 bench/throughput_table.py bench.jsonl [--clocks bench-clocks.csv]

--clocks: the nvidia-smi log of the same call (ci/gpu.sh's bench stage: timestamp, clocks.sm, clocks.mem,
temperature, power.draw, throttle reasons every 250 ms; its timestamps read as UTC). Each run's timed windows — the
`window`-step windows that ended at its `ended_unix_s` — select the samples that give its SM clock (median), power
(median) and energy per step (median power × median step time), and whether the power cap throttled it."""
import argparse
import csv
import datetime
import json
import statistics
import sys

ap = argparse.ArgumentParser()
ap.add_argument("jsonl", nargs="+")
ap.add_argument("--clocks", help="the nvidia-smi CSV log of the same call")
args = ap.parse_args()

rows = []
for path in args.jsonl:
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))


def read_clocks(path):
    """(unix time, SM MHz, W, throttle-reason bits) per sample; a header line may repeat (appended logs)."""
    out = []
    with open(path) as f:
        for n, rec in enumerate(csv.reader(f), 1):
            rec = [c.strip() for c in rec]
            if not rec or rec[0].startswith("timestamp"):
                continue
            try:
                t = datetime.datetime.strptime(rec[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
                reasons = int(rec[5], 16) if len(rec) > 5 and rec[5].startswith("0x") else 0  # "[N/A]" on some GPUs
                out.append((t.timestamp(), float(rec[1].split()[0]), float(rec[4].split()[0]), reasons))
            except (ValueError, IndexError):
                sys.exit(f"{path}:{n}: expected 'timestamp, clocks.sm [MHz], clocks.mem [MHz], temperature, "
                         f"power.draw [W], throttle reasons' (nvidia-smi --format=csv), got {','.join(rec)!r}")
    return out


def timed_samples(r, samples):
    """The samples taken while the run's timed windows ran (none where the row lacks the times)."""
    if "ended_unix_s" not in r or not r.get("windows_ms"):
        return []
    w, steps = r.get("window", 10), r["steps"]
    sizes = [min(w, steps - i * w) for i in range(len(r["windows_ms"]))]
    seconds = sum(n * ms for n, ms in zip(sizes, r["windows_ms"])) / 1000.0
    end = r["ended_unix_s"]
    return [s for s in samples if end - seconds <= s[0] <= end]


samples = read_clocks(args.clocks) if args.clocks else None

rows = [r for r in rows if "tokens_per_s" in r]  # (the FP8 breakdown line is not a throughput row)


def baselines(impl):
    """For each row, the row of `impl` with its strategy last read before it (else the last in the files)."""
    last = {r["strategy"]: r for r in rows if r["impl"] == impl}
    before, seen = [], {}
    for r in rows:
        if r["impl"] == impl:
            seen[r["strategy"]] = r
        before.append(seen.get(r["strategy"], last.get(r["strategy"])))
    return before


base, compiled = baselines("pytorch-python-eager"), baselines("pytorch-python-compile")
engine_bf16 = {r.get("probe_every"): r for r in rows if r["impl"] == "ampcheck-cpp" and r["strategy"] == "bf16-autocast"
               and r.get("head_loss", "stock") == "stock" and not r.get("cuda_graphs")
               and not r.get("fused_layernorm") and not r.get("fused_bias_gelu")
               and not r.get("gemm_epilogues") and not r.get("fused_grad_check") and not r.get("fused_param_norm")}


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
    if r.get("fused_param_norm"):
        parts.append("norms from AdamW")
    return " + ".join(parts) or "stock"


def windows(r):
    """The timed windows' ms per step in the order they ran (older rows: min-max)."""
    if r.get("windows_ms"):
        return " ".join(f"{w:.2f}" for w in r["windows_ms"])
    return f'{r["min_step_ms"]:.2f}-{r["max_step_ms"]:.2f}'


def clock_cells(r):
    """SM clock, power, energy per step and the power-cap flag over the run's timed windows."""
    got = timed_samples(r, samples)
    if not got:
        return " - | - | - |"
    mhz = statistics.median(s[1] for s in got)
    watts = statistics.median(s[2] for s in got)
    capped = sum(1 for s in got if s[3] & 0x4)  # 0x4: software power cap
    return f' {mhz:.0f} | {watts:.0f}{" (cap)" if 2 * capped > len(got) else ""} | {watts * r["median_step_ms"] / 1000:.1f} |'


clock_head = " SM MHz | W | J/step |" if samples is not None else ""
print("| implementation | engine path | strategy | full probes | tokens/s | TFLOP/s | MFU | median ms/step (windows) | peak GiB "
      "| vs Python eager | vs torch.compile | vs engine bf16 |" + clock_head)
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- | --- |" if clock_head else ""))
PEAK_TFLOPS = {"bf16-autocast": 989.0, "fp16-autocast": 989.0, "fp8": 989.0}  # H200 dense bf16/fp16 spec (MFU vs bf16)
for i, r in enumerate(rows):
    b = base[i]
    ratio = f'{r["tokens_per_s"] / b["tokens_per_s"]:.3f}' if b else "-"
    e = engine_bf16.get(r.get("probe_every")) if r["impl"] == "ampcheck-cpp" else None
    vs_bf16 = f'{r["tokens_per_s"] / e["tokens_per_s"]:.3f}' if e else "-"
    pe = r.get("probe_every")
    probes = "-" if pe is None else ("never" if pe == 0 else "every step" if pe == 1 else f"every {pe}")
    c = compiled[i]
    vs_c = f'{r["tokens_per_s"] / c["tokens_per_s"]:.3f}' if c else "-"
    mfu = r["tflops"] / PEAK_TFLOPS.get(r["strategy"], 989.0)
    print(f'| {r["impl"]} | {engine_path(r)} | {r["strategy"]} | {probes} | {r["tokens_per_s"] / 1e3:.1f}k | {r["tflops"]:.0f} | {mfu:.0%} | '
          f'{r["median_step_ms"]:.2f} ({windows(r)}) | {r["peak_memory_gib"]:.1f} | {ratio} | {vs_c} | {vs_bf16} |'
          + (clock_cells(r) if samples is not None else ""))
if rows:
    r = rows[0]
    print(f'\n{r["device"]}, {r["preset"]} ({r["params"] / 1e6:.1f}M params), batch {r["batch"]} x {r["seq"]} tokens. '
          "MFU: model TFLOP/s over the H200's dense bf16 peak of 989 TFLOP/s (fp8 runs too, so their MFU compares with bf16).")
    if samples is not None:
        print("SM MHz, W: medians of the nvidia-smi samples taken during the run's timed windows (\"(cap)\": most of them "
              "throttled by the power cap); J/step: that power × the median step time.")
    ws = {x.get("warmup_seconds") for x in rows if x.get("warmup_seconds")}
    if ws:
        print(f"Each run trained {', '.join(f'{w:g}' for w in sorted(ws))} s past its warm-up steps before the timed windows "
              "(--warmup-seconds: the GPU's clocks and temperature under the step's load).")
