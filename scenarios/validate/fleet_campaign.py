#!/usr/bin/env python3
"""Fleet blame campaign (issue 52, item 5): how often `ampcheck validate --fleet` names the right ranks.

Each case draws a fleet of W = 2-8 Gloo CPU ranks under torchrun (the FP32 MLP validation scenario, a few steps), and
at random: planted faults (one rank persistent or transient, the same plant on several ranks, two ranks with different
plants, a no-effect plant, an exponent flip that makes the run non-finite, or none), configuration drift on random
ranks (MKL_CBWR=COMPATIBLE or ATEN_CPU_CAPABILITY=avx2, through a rank wrapper), with or without a golden (recorded
here first), with or without the FP32 references of validate's statistical verdict (recorded here first; drawn
from a generator of their own, so a seed's fleets, plants and goldens are those it drew before the references were
added). Seeded: the same --seed draws the same cases.

Ground truth: the faulty ranks are those with a plant that has an effect. Each case is classed from summary.json:
  correct      the ranks blamed are exactly the faulty ones (a fault-free fleet: nobody blamed, exit 0)
  partial      some faulty ranks blamed, none healthy, some faulty missed, or nobody blamed and no "cannot tell"
  cannot tell  no healthy rank blamed and the report says it cannot tell which side (no golden, too small a majority)
  wrong        a healthy rank blamed
and, with a golden, the healthy ranks blamed (goal 0). --alternatives re-derives the blame under other values of the
no-golden majority rule (kFleetMinMajority) from the votes in summary.json, to choose it on one draw.

  nice -n 5 python3 scenarios/validate/fleet_campaign.py --ampcheck build/ampcheck --seed 1 --cases 24 --alternatives
"""
import argparse
import collections
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

SCENARIO = "scenarios/validate/fp32-mlp-sgd.yaml"
BLAME = {"differs from its golden", "outlier", "non-finite", "diverges"}
WEIGHTS = ["fc.0.weight", "fc.1.weight", "head.weight"]  # the MLP's matrices (64 x 64 / 64 x 128 / ...)
NO_EFFECT = "bitflip:param:fc.0.bias:0:10@0"  # a low exponent bit of a zero bias: 1.4e-42, absorbed by the update
DRIFTS = ["MKL_CBWR=COMPATIBLE", "ATEN_CPU_CAPABILITY=avx2"]
# the reference root of a case, by (a golden, the FP32 references)
REFERENCE_ROOTS = {(True, False): "refs", (False, False): "no-refs", (True, True): "refs-fp32",
                   (False, True): "fp32-only"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


KINDS = ["none", "one-persistent", "one-transient", "same-on-several", "two-different", "no-effect", "nonfinite"]
# --gross: also the same exponent flip (the run goes non-finite) on k = 2..W ranks, every rank included — a faulty
# majority, or a fleet with no completed run, that only the FP32 references or a failing majority's own runs expose
GROSS_KINDS = KINDS + ["nonfinite-several", "nonfinite-several"]


def draw_case(rng, steps, kinds=KINDS):
    w = rng.choice([2, 3, 3, 4, 4, 5, 6, 8])
    golden = rng.random() < 0.5
    kind = rng.choice(kinds)
    if w == 2 and kind in ("same-on-several", "two-different"):
        kind = "one-persistent"

    def flip(transient=False):
        bit = rng.randint(20, 29)
        el = rng.randint(0, 63)
        step = rng.randint(1, steps - 2)
        return f"bitflip:param:{rng.choice(WEIGHTS)}:{el}:{bit}@{step}" + (":transient" if transient else "")

    plants = {}  # rank -> plant text
    faulty = set()
    ranks = list(range(w))
    if kind == "one-persistent":
        r = rng.choice(ranks); plants[r] = flip(); faulty.add(r)
    elif kind == "one-transient":
        r = rng.choice(ranks); plants[r] = flip(True); faulty.add(r)
    elif kind == "same-on-several":
        k = rng.randint(2, w - 1)
        p = flip(rng.random() < 0.3)
        for r in rng.sample(ranks, k):
            plants[r] = p; faulty.add(r)
    elif kind == "two-different":
        for r in rng.sample(ranks, 2):
            plants[r] = flip(); faulty.add(r)
    elif kind == "no-effect":
        plants[rng.choice(ranks)] = NO_EFFECT
    elif kind == "nonfinite":
        r = rng.choice(ranks)
        plants[r] = f"bitflip:param:fc.0.weight:{rng.randint(0, 63)}:30@{rng.randint(1, steps - 2)}"
        faulty.add(r)
    elif kind == "nonfinite-several":
        p = f"bitflip:param:fc.0.weight:{rng.randint(0, 63)}:30@{rng.randint(1, steps - 2)}"
        for r in rng.sample(ranks, rng.randint(2, w)):
            plants[r] = p; faulty.add(r)
    drift = {}
    if rng.random() < 0.4 and w >= 3:
        for r in rng.sample(ranks, rng.randint(1, min(2, w - 2))):
            drift[r] = rng.choice(DRIFTS)
    return {"w": w, "golden": golden, "kind": kind, "plants": plants, "faulty": sorted(faulty), "drift": drift}


def run_case(args, case, work, i):
    out = os.path.join(work, f"case{i}")
    wrapper = os.path.join(work, "drift.sh")
    env = dict(os.environ)
    env["FLEET_DRIFT"] = json.dumps({str(k): v for k, v in case["drift"].items()})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(case["w"]), "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), "--no-python", wrapper, args.ampcheck, "validate",
           "--fleet", SCENARIO, "--references", os.path.join(work, REFERENCE_ROOTS[(case["golden"], case["fp32"])]),
           "--steps", str(args.steps), "--device", "cpu", "--out", out]
    for r, p in sorted(case["plants"].items()):
        cmd += ["--plant-rank", f"{r}:{p}"]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    took = time.time() - t0
    path = os.path.join(out, "summary.json")
    if not os.path.exists(path):
        return None, proc.returncode, took, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.load(open(path)), proc.returncode, took, ""


def blame_of(s, min_majority=None):
    """(blamed, cannot) rank sets; with min_majority, the no-golden votes re-decided under that rule."""
    blamed, cannot = set(), set()
    fixed = {r["rank"] for r in s["ranks"] if r["status"] in BLAME - {"outlier"}}
    if min_majority is None:
        blamed = {r["rank"] for r in s["ranks"] if r["status"] in BLAME}
        cannot = {r["rank"] for r in s["ranks"] if r["status"] == "cannot tell"}
        return blamed, cannot
    blamed |= fixed
    nonfinite = {r["rank"] for r in s["ranks"] if r["status"] == "non-finite"}
    for v in s.get("votes", []):
        if v.get("against_golden"):
            continue
        sides = v.get("sides", [])
        ranks = [r for side in sides for r in side["ranks"]]
        if len(sides) < 2:
            continue
        finite = [side for side in sides if not set(side["ranks"]) <= nonfinite]
        top = sides[0]
        failing = {r["rank"] for r in s["ranks"] if r["status"] in ("non-finite", "diverges")}
        if set(top["ranks"]) <= failing:  # a failing majority does not outvote a sound run
            continue
        if 2 * len(top["ranks"]) > len(ranks) and len(top["ranks"]) >= min_majority:
            blamed |= set(ranks) - set(top["ranks"])
        elif len(finite) >= 2:  # a non-finite side explains the split on its own
            cannot |= set(ranks)
    return blamed, cannot - blamed


def classify(case, blamed, cannot):
    faulty = set(case["faulty"])
    healthy_blamed = blamed - faulty
    if healthy_blamed:
        return "wrong", len(healthy_blamed)
    if blamed == faulty and not cannot:
        return "correct", 0
    if cannot:
        return "cannot tell", 0
    return "partial", 0


def table(rows, title):
    by = collections.Counter(r["class"] for r in rows)
    n = len(rows)
    g = [r for r in rows if r["golden"]]
    hb = sum(r["healthy_blamed"] for r in g)
    lines = [f"**{title}** ({n} cases)", "", "| | cases | share |", "| --- | --- | --- |"]
    for c in ["correct", "partial", "cannot tell", "wrong"]:
        lines.append(f"| {c} | {by[c]} | {100.0 * by[c] / max(n, 1):.0f}% |")
    lines.append(f"| healthy ranks blamed with a golden ({len(g)} cases) | {hb} | |")
    for with_fp32 in (True, False):
        part = [r for r in rows if r.get("fp32", False) == with_fp32]
        c = collections.Counter(r["class"] for r in part)
        lines.append(f"| {'with' if with_fp32 else 'without'} the FP32 references ({len(part)} cases) | "
                     + ", ".join(f"{k} {c[k]}" for k in ["correct", "partial", "cannot tell", "wrong"]) + " | |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ampcheck", default="build/ampcheck")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=24)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--alternatives", action="store_true", help="re-derive blame for kFleetMinMajority 2, 3, 4")
    ap.add_argument("--gross", action="store_true",
                    help="also draw the same non-finite flip on 2..W ranks (a new draw: other cases than without it)")
    ap.add_argument("--fp32-share", type=float, default=0.5,
                    help="the share of cases whose reference root holds the FP32 references (0: none, as before)")
    ap.add_argument("--json", help="write every case and its outcome here")
    args = ap.parse_args()
    args.ampcheck = os.path.abspath(args.ampcheck)
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="fleet-campaign-")
    with open(os.path.join(work, "drift.sh"), "w") as f:
        f.write('#!/usr/bin/env bash\n'
                'set -e\n'
                'kv=$(python3 -c \'import json,os,sys; print(json.loads(os.environ["FLEET_DRIFT"]).get(os.environ["RANK"], ""))\')\n'
                '[ -n "$kv" ] && export "$kv"\n'
                'exec "$@"\n')
    os.chmod(os.path.join(work, "drift.sh"), 0o755)
    for root in ("refs", "refs-fp32"):  # the goldens
        subprocess.run([args.ampcheck, "validate", SCENARIO, "--record", "--references", os.path.join(work, root),
                        "--steps", str(args.steps)], check=True, capture_output=True)
    if args.fp32_share > 0:
        for root in ("refs-fp32", "fp32-only"):  # the FP32 references (validate's statistical verdict)
            subprocess.run([args.ampcheck, "record", SCENARIO, "--references", os.path.join(work, root),
                            "--steps", str(args.steps)], check=True, capture_output=True)
    os.makedirs(os.path.join(work, "no-refs"), exist_ok=True)
    rows = []
    t_all = time.time()
    for i in range(args.cases):
        case = draw_case(rng, args.steps, GROSS_KINDS if args.gross else KINDS)
        # the FP32 references from a generator of their own: the fleets, plants and goldens stay the seed's
        case["fp32"] = random.Random(args.seed * 100003 + i).random() < args.fp32_share
        s, rc, took, tail = run_case(args, case, work, i)
        row = dict(case, rc=rc, seconds=round(took, 1))
        if s is None:
            row.update({"class": "wrong", "healthy_blamed": 0, "error": tail})
            print(f"case {i}: no report (exit {rc})\n{tail}", file=sys.stderr)
            rows.append(row)
            continue
        blamed, cannot = blame_of(s)
        cls, hb = classify(case, blamed, cannot)
        row.update({"class": cls, "healthy_blamed": hb, "blamed": sorted(blamed), "cannot": sorted(cannot),
                    "statuses": [r["status"] for r in s["ranks"]], "verdict": s["verdict"],
                    "no_effect_said": any("no measurable effect" in r["message"] or "cannot be measured" in r["message"]
                                          for r in s["ranks"]),
                    "loss_deviation": {r["rank"]: r["loss_deviation"] for r in s["ranks"] if r["loss_deviation"] >= 0},
                    "statistical": {r["rank"]: r.get("statistical", "") for r in s["ranks"] if r.get("statistical")},
                    "summary": s})
        for m in (2, 3, 4):
            b, c = blame_of(s, m)
            row[f"class_m{m}"] = classify(case, b, c)
        rows.append(row)
        print(f"case {i}: W={case['w']} golden={case['golden']} fp32={case['fp32']} {case['kind']} "
              f"plants={case['plants']} "
              f"drift={case['drift']} -> blamed {sorted(blamed)} cannot {sorted(cannot)} "
              f"[{cls}] exit {rc} ({took:.0f} s)", flush=True)
    print()
    print(table(rows, f"seed {args.seed}"))
    noeff = [r for r in rows if r["kind"] == "no-effect" and "summary" in r]
    print(f"\nno-effect plants said in the report (no measurable effect, or cannot be measured): "
          f"{sum(r['no_effect_said'] for r in noeff)} of {len(noeff)}")
    healthy_dev = [d for r in rows for k, d in r.get("loss_deviation", {}).items() if int(k) not in r["faulty"]]
    faulty_dev = [d for r in rows for k, d in r.get("loss_deviation", {}).items() if int(k) in r["faulty"]]
    if healthy_dev:
        print(f"drift ranks' loss deviation from the main stack: healthy max {max(healthy_dev):.3g} "
              f"({len(healthy_dev)}), planted {sorted(round(d, 6) for d in faulty_dev)}")
    if args.alternatives:
        print("\nthe no-golden majority rule re-derived from the votes (kFleetMinMajority):")
        for m in (2, 3, 4):
            c = collections.Counter(r[f"class_m{m}"][0] for r in rows if f"class_m{m}" in r)
            print(f"  M={m}: " + ", ".join(f"{k} {c[k]}" for k in ["correct", "partial", "cannot tell", "wrong"]))
    print(f"\ncampaign: {time.time() - t_all:.0f} s, work {work}")
    if args.json:
        for r in rows:
            r.pop("summary", None)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
