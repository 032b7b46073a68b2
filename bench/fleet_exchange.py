#!/usr/bin/env python3
"""What `ampcheck validate --fleet` costs in messages: bytes per rank and the exchanges' time at several world sizes
(CPU processes on Gloo under torchrun), and the same extrapolated on paper to a large fleet from the message sizes.

Per world size W, one `torchrun --nproc-per-node W ampcheck validate --fleet` of one validation scenario (default the
FP32 MLP at 12 steps, against a golden recorded first into a scratch reference root under --out): rank 0's summary.json
`exchange` record — the identity message (host, device, the stack fingerprint: sent once), the runs message (per
scenario its trajectory hash, status and golden comparison: sent every repetition), how many exchanges, the bytes rank
0 sent and received (padding included: an all-gather pads every message to the longest), the seconds inside the
exchanges (each after a barrier, so the time is the transfer, not the wait for the slowest rank) — and the command's
wall clock. Every exchange is an all-gather, except one broadcast of the majority's trajectory per vote with outliers
(none here: the runs are fault-free).

On paper: an all-gather of messages of m bytes over W ranks delivers W x (8 + m) bytes to every rank (the 8: the
length exchanged first); rank 0 receives that for the identity once and for the runs and findings messages every
repetition. Time on paper: Gloo's all-gather is a ring of W - 1 steps, each a message of m bytes, so
t = (W - 1) (alpha + (8 + m) / beta) per all-gather (plus the lengths' all-gather: (W - 1) alpha); alpha and beta are
the network's per-message latency and bandwidth (--alpha-us, --beta-gbs: default 50 us and 1.25 GB/s, 10 Gb/s
TCP). The CPU measurements here (W processes on this machine's cores, oversubscribed beyond them) are fitted to
t = a + b (W - 1) too, for the record: on an oversubscribed machine b is scheduling, not the network.

    python3 bench/fleet_exchange.py --ampcheck build/ampcheck --out /tmp/fleet-bench --world-sizes 2,4,8
Writes --out/fleet_exchange.jsonl and --out/fleet_exchange.md (refuses a non-empty --out without --force).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_fleet(args, world, refs, out):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), "--no-python", args.ampcheck, "validate", "--fleet",
           args.scenario, "--references", refs, "--steps", str(args.steps), "--device", "cpu", "--out", out]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"world size {world}: exit {p.returncode}\n{p.stdout[-3000:]}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    x = s["exchange"]
    assert s["pass"] and s["world_size"] == world, s["verdict"]
    return {"world_size": world, "exchanges": x["exchanges"], "identity_bytes": x["identity_bytes"],
            "runs_bytes": x["runs_bytes"], "largest_message": x["largest_message"], "bytes_sent": x["bytes_sent"],
            "bytes_received": x["bytes_received"], "exchange_s": x["seconds"], "wall_s": wall}


def fit(rows):
    """Least squares t = a + b (W - 1) over the measured rows."""
    xs = [r["world_size"] - 1 for r in rows]
    ys = [r["exchange_s"] for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace a non-empty --out")
    ap.add_argument("--scenario", default=os.path.join(HERE, "..", "scenarios", "validate", "fp32-mlp-sgd.yaml"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--world-sizes", default="2,4,8")
    ap.add_argument("--paper", default="64,512,1024", help="world sizes extrapolated on paper")
    ap.add_argument("--alpha-us", type=float, default=50.0, help="per-message latency on paper (microseconds)")
    ap.add_argument("--beta-gbs", type=float, default=1.25, help="bandwidth on paper (GB/s)")
    args = ap.parse_args()
    if os.path.exists(args.out) and os.listdir(args.out):
        if not args.force:
            sys.exit(f"{args.out}: exists and is not empty; refusing to overwrite. HINT: pass --force")
        shutil.rmtree(args.out)
    os.makedirs(args.out, exist_ok=True)
    refs = os.path.join(args.out, "refs")
    subprocess.run([args.ampcheck, "validate", args.scenario, "--record", "--references", refs, "--steps",
                    str(args.steps)], check=True, stdout=subprocess.DEVNULL)
    rows = [run_fleet(args, int(w), refs, os.path.join(args.out, f"w{w}")) for w in args.world_sizes.split(",")]
    a, b = fit(rows)
    ident = max(r["identity_bytes"] for r in rows)
    runs = max(r["runs_bytes"] for r in rows)
    findings = 40  # an empty findings message: {"rank":N,"elapsed_s":x,"findings":[]}
    with open(os.path.join(args.out, "fleet_exchange.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    md = ["| world size | exchanges | identity msg (B) | runs msg (B) | rank 0 sent (B) | rank 0 received (B) "
          "| in exchanges (s) | wall (s) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        md.append(f"| {r['world_size']} | {r['exchanges']} | {r['identity_bytes']} | {r['runs_bytes']} | "
                  f"{r['bytes_sent']} | {r['bytes_received']} | {r['exchange_s']:.4f} | {r['wall_s']:.1f} |")
    alpha, beta = args.alpha_us * 1e-6, args.beta_gbs * 1e9

    def ring(w, m):  # one all-gather of m-byte messages: the lengths' ring, then the messages'
        return (w - 1) * alpha + (w - 1) * (alpha + (8 + m) / beta)

    md += ["", f"Fit of the measured exchange time, t = a + b (W - 1): a = {a * 1e3:.2f} ms, b = {b * 1e3:.3f} ms per "
           "rank (processes beyond the cores: scheduling, not a network).", "",
           f"On paper (ring all-gather, alpha = {args.alpha_us:g} us, beta = {args.beta_gbs:g} GB/s):", "",
           "| world size | received per rank: identity (once) | per repetition: runs + findings "
           "| time: identity (once) | time per repetition |", "| --- | --- | --- | --- | --- |"]
    for w in [int(x) for x in args.paper.split(",")]:
        once = w * (8 + ident)
        per_rep = w * (8 + runs) + w * (8 + findings)
        md.append(f"| {w} | {once / 1e6:.3f} MB | {per_rep / 1e6:.3f} MB | {ring(w, ident) * 1e3:.0f} ms "
                  f"| {(ring(w, runs) + ring(w, findings)) * 1e3:.0f} ms |")
    with open(os.path.join(args.out, "fleet_exchange.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
