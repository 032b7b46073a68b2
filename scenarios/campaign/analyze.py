#!/usr/bin/env python3
"""The calibration campaign's tables (scenarios/campaign/README.md), as Markdown on stdout.

    python3 scenarios/campaign/analyze.py DIR [DIR...] [--out FILE] [--results results-check.jsonl] [--assert]

Reads DIR/results.jsonl (run.py; or --results NAME inside each DIR), the trajectories and references it points to,
and, where present, DIR/rejudge/<set>/results.jsonl (the noise-set study) and DIR/results-check.jsonl (the
verdicts given at training time). --assert: exit 1 unless no correct scenario fails and every bug with a measurable
effect is caught (the offending rows are printed). Needs numpy and h5py.
"""
import argparse
import collections
import json
import math
import os
import sys

import numpy as np

OUTCOME = ["loss", "grad_norm", "update_norm", "skipped", "nonfinite_grads"]
DIAGNOSTIC = ["zero_grads", "subnormal_grads", "fp8_saturated", "fp8_flushed"]
WINDOW = 10        # trailing mean, as the verdict's window
K = 6.0            # the verdict's k (verdict::Tolerance; --k for a sweep): allowed = max(K x noise, floor)
RATIO_FLOOR = 1.1  # the verdict's ratio_floor for grad / update norm ratios (--ratio-floor)
MAX_SKIPPED = 0.25 # the verdict's max_skipped_fraction
ENVELOPE = 9       # noise envelope: max over steps s-9..s+9
STATUS = ("error", "nonfinite")

def effect_definition():
    return f"""**Effect** of a bug = how far its trajectory lies from its *twin* (the correct scenario of the same
workload and strategy without the bug; for the underflow-without-scaler and `.half()` bugs the nearest correct
setup: fp16 autocast + GradScaler, fp16 params + fp32 masters), in units of FP32 noise. Per step s and metric m —
loss (trailing mean over {WINDOW} steps), log grad_norm and log(update_norm / lr) (trailing means over {WINDOW} steps of
the finite values, skipped steps excluded) — |m_bug(s) − m_twin(s)| / noise_m(s), where noise_m(s) = the max over
the steps s−{ENVELOPE}..s+{ENVELOPE} of the max over the reference's noise runs of |m_noise − m_reference| (steps where it is
0 or NaN are ignored). effect = the max over steps and metrics. **No measurable effect**: effect ≤ 1 and the same
number of skipped steps as the twin. A bug that raised or went non-finite has effect "status" (always measurable).
**Effect in allowance units** (`eff/allowed`): the same differences divided by the verdict's own allowance,
max(k × noise_m(s), floor_m) (k = {K}, floor log({RATIO_FLOOR}) for the norm ratios, none for the loss), and a skipped-step
difference as a share of the steps over the allowed {MAX_SKIPPED}: the margin the bug would get if its correct twin were
the reference. A bug with eff/allowed ≤ 1 moves the outcomes less than the rules allow a correct strategy to —
within the tolerance by construction; one with eff/allowed > 1 must be caught, and ≥ 3 is where the target of a
≥ 3× margin applies."""


# ---------------------------------------------------------------------------------------------------------------
# effect

def trailing_mean(x, w=WINDOW):
    out = np.full(len(x), np.nan)
    for s in range(len(x)):
        seg = x[max(0, s - w + 1):s + 1]
        seg = seg[np.isfinite(seg)]
        if len(seg):
            out[s] = seg.mean()
    return out


def metrics(cols):
    """cols: dict of numpy arrays (loss, grad_norm, update_norm, lr, skipped) -> dict of per-step metrics."""
    skipped = cols["skipped"] > 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.log(np.maximum(cols["grad_norm"], 1e-30))
        u = np.log(np.maximum(cols["update_norm"], 1e-30) / cols["lr"])
    g[skipped | ~np.isfinite(cols["grad_norm"])] = np.nan
    u[skipped | ~np.isfinite(u) | ~(cols["lr"] > 0)] = np.nan
    loss = np.where(np.isfinite(cols["loss"]), cols["loss"], np.nan)
    return {"loss": trailing_mean(loss), "grad_norm": trailing_mean(g), "update_norm": trailing_mean(u)}


class Trajectories:
    def __init__(self):
        self.cache = {}

    def read(self, path, group="steps"):
        key = (path, group)
        if key not in self.cache:
            import h5py
            with h5py.File(path, "r") as f:
                g = f[group]
                self.cache[key] = {c: g[c][:] for c in ("loss", "grad_norm", "update_norm", "lr", "skipped")}
        return self.cache[key]

    def noise(self, ref_path):
        key = (ref_path, "noise-env")
        if key not in self.cache:
            import h5py
            ref = metrics(self.read(ref_path))
            with h5py.File(ref_path, "r") as f:
                labels = list(f["noise"].keys())
            env = {}
            for m in ref:
                dev = np.full(len(ref[m]), np.nan)
                for l in labels:
                    nm = metrics(self.read(ref_path, "noise/" + l))[m]
                    d = np.abs(nm - ref[m])
                    dev = np.fmax(dev, d)
                e = np.full(len(dev), np.nan)
                for s in range(len(dev)):
                    seg = dev[max(0, s - ENVELOPE):s + ENVELOPE + 1]
                    seg = seg[np.isfinite(seg)]
                    if len(seg):
                        e[s] = seg.max()
                env[m] = e
            self.cache[key] = env
        return self.cache[key]


def effect_of(row, twin, d, tr):
    """(effect, per-metric max, skip counts equal) or a string: 'status' / 'n/a: why'."""
    if row.get("status") in STATUS or row.get("verdict") in STATUS:
        return "status", None, None
    if twin is None:
        return "n/a: no twin", None, None
    if not row.get("trajectory") or not twin.get("trajectory") or not row.get("reference"):
        return "n/a: no trajectory", None, None
    if twin.get("status") != "completed":
        return "n/a: twin " + str(twin.get("status")), None, None
    b = tr.read(os.path.join(d, row["trajectory"]))
    t = tr.read(os.path.join(d, twin["trajectory"]))
    noise = tr.noise(os.path.join(d, row["reference"]))
    mb, mt = metrics(b), metrics(t)
    per, per_a = {}, {}
    for m in mb:
        n = min(len(mb[m]), len(mt[m]), len(noise[m]))
        diff = np.abs(mb[m][:n] - mt[m][:n])
        floor = 0.0 if m == "loss" else math.log(RATIO_FLOOR)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = diff / noise[m][:n]
            ra = diff / np.maximum(K * noise[m][:n], floor)
        ok = np.isfinite(r) & (noise[m][:n] > 0)
        per[m] = float(r[ok].max()) if ok.any() else float("nan")
        oka = np.isfinite(ra) & (np.maximum(K * noise[m][:n], floor) > 0)
        per_a[m] = float(ra[oka].max()) if oka.any() else float("nan")
    vals = [v for v in per.values() if math.isfinite(v)]
    eff = max(vals) if vals else float("nan")
    nb, nt = int(np.nansum(b["skipped"] > 0.5)), int(np.nansum(t["skipped"] > 0.5))
    same_skips = nb == nt
    per_a["skipped"] = abs(nb - nt) / max(len(b["skipped"]), 1) / MAX_SKIPPED
    vals_a = [v for v in per_a.values() if math.isfinite(v)]
    EFFECT_ALLOWED[id(row)] = max(vals_a) if vals_a else float("nan")
    return eff, per, same_skips


EFFECT_ALLOWED = {}  # id(row) -> effect in allowance units (effect_of fills it)


def effect_allowed(r):
    """The bug's effect in allowance units; inf for a status bug (raised / non-finite); None if unknown."""
    if r.get("status") in STATUS or r.get("verdict") in STATUS:
        return math.inf
    v = EFFECT_ALLOWED.get(id(r))
    return v if v is not None and math.isfinite(v) else None


def measurable(e):
    eff, per, same = e
    if eff == "status":
        return True
    if isinstance(eff, str):
        return None  # unknown
    return (not (eff <= 1.0)) or not same


# ---------------------------------------------------------------------------------------------------------------
# rows

def load(dirs, results_name):
    rows = []
    for d in dirs:
        name = results_name
        if name is None:
            name = "results.jsonl"
        p = os.path.join(d, name)
        if not os.path.exists(p):
            sys.exit(f"{p}: not found (run scenarios/campaign/run.py {d} first)")
        with open(p) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    r["_dir"] = d
                    rows.append(r)
    return rows


def classify(r):
    """Fired outcome and diagnostic signals, and whether the status decided."""
    sig = r.get("signals") or {}
    fo = [s for s in OUTCOME if sig.get(s, {}).get("fired")]
    fd = [s for s in DIAGNOSTIC if sig.get(s, {}).get("fired")]
    status = r.get("verdict") in STATUS or r.get("status") in STATUS
    return fo, fd, status


def harness_error(r):
    return r.get("verdict") in (None, "-", "") or r.get("status") == "no-trajectory" and r.get("verdict") not in STATUS


def decider(r):
    if r.get("verdict") in STATUS:
        return "status"
    return r.get("deciding_signal") or "?"


def margin(r):
    s = r.get("deciding_signal")
    if s and s in (r.get("signals") or {}):
        return r["signals"][s].get("max_margin")
    return r.get("max_deviation_bands")


def pct(n, d):
    return f"{100.0 * n / d:.1f}%" if d else "—"


def fmt(x, p=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, str):
        return x
    return f"{x:.{p}g}"


def counter_str(c):
    return ", ".join(f"{k} {v}" for k, v in c.most_common()) or "—"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------

def correct_groups(r):
    g = [("strategy", r["strategy"])]
    v = r.get("variant") or "plain"
    if v != "plain":
        g.append(("variant", f"{v} ({r['strategy']})"))
    loop = []
    if (r.get("micro_batches") or 1) > 1:
        g.append(("loop", "accumulation, loss divided"))
        loop.append(1)
    if r.get("clip"):
        g.append(("loop", "clip after unscale_"))
        loop.append(1)
    if r.get("two_optimizers"):
        g.append(("loop", "two optimizers"))
        loop.append(1)
    if not loop:
        g.append(("loop", "plain loop (no accumulation, clipping, second optimizer)"))
    g.append(("model", f"{r.get('model')} / {r.get('optimizer')}"))
    return g


def summarize_correct(rows):
    groups = collections.OrderedDict()
    for r in rows:
        for kind, label in correct_groups(r):
            groups.setdefault((kind, label), []).append(r)
    out = []
    for (kind, label), rs in sorted(groups.items(), key=lambda kv: (["strategy", "variant", "loop", "model"].index(kv[0][0]), kv[0][1])):
        fa = [r for r in rs if r["verdict"] != "tracks"]
        by = collections.Counter(decider(r) for r in fa)
        only_diag = sum(1 for r in fa if (lambda fo, fd, st: not fo and fd and not st)(*classify(r)))
        margins = sorted(r.get("max_deviation_bands") or 0 for r in rs if r["verdict"] == "tracks")
        near = sum(m > 1 / 3 for m in margins)
        out.append([kind, label, len(rs), len(fa), pct(len(fa), len(rs)), counter_str(by), only_diag,
                    fmt(margins[len(margins) // 2] if margins else None), fmt(margins[-1] if margins else None), near])
    return out


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    i = q * (len(xs) - 1)
    lo, hi = int(math.floor(i)), int(math.ceil(i))
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--results", default=None, help="results file inside each DIR (default results.jsonl)")
    ap.add_argument("--assert", dest="check", action="store_true",
                    help="exit 1 unless zero false alarms and every bug with a measurable effect caught")
    ap.add_argument("--no-effect", action="store_true", help="skip the effect measure (no trajectories read)")
    ap.add_argument("--k", type=float, default=6.0, help="the verdict's k the results were judged with (default 6)")
    ap.add_argument("--ratio-floor", type=float, default=1.1, help="the verdict's ratio_floor (default 1.1)")
    args = ap.parse_args()
    globals().update(K=args.k, RATIO_FLOOR=args.ratio_floor)

    rows = load(args.dirs, args.results)
    by_key = {(r["_dir"], r["name"]): r for r in rows}
    tr = Trajectories()
    md = []
    P = md.append

    # provenance / coverage
    P(f"# Calibration campaign: {', '.join(args.dirs)}\n")
    for d in args.dirs:
        try:
            info = json.load(open(os.path.join(d, "campaign.json")))
            n_man = sum(1 for _ in open(os.path.join(d, "manifest.jsonl")))
        except OSError:
            info, n_man = {}, None
        n_res = sum(1 for r in rows if r["_dir"] == d)
        src = "re-judged (`run.py --rejudge`, set all)" if any(r.get("rejudged") for r in rows if r["_dir"] == d) \
            else "check-time verdicts (the campaign's binary)"
        P(f"- `{d}`: seed {info.get('seed')}, {info.get('workloads')} workloads; {n_res} of {n_man} scenarios have a "
          f"result; verdicts: {src} (`{args.results or 'results.jsonl'}`)")
    herr = [r for r in rows if harness_error(r)]
    valid = [r for r in rows if not harness_error(r)]
    correct = [r for r in valid if r["kind"] == "correct"]
    bugs = [r for r in valid if r["kind"] == "bug"]
    P(f"- {len(correct)} correct and {len(bugs)} bug scenarios judged; {len(herr)} harness errors (no verdict: "
      f"{counter_str(collections.Counter((r.get('message') or '')[:60] for r in herr))})\n")

    # ---- correct
    P("## Correct setups: false alarms (verdict ≠ tracks)\n")
    P("Grouped by strategy, by pitfall-free variant, by the workload's loop (a scenario counts in each group it "
      "belongs to) and by model / optimizer. 'only diag.': false alarms where no outcome signal (loss, grad_norm, "
      "update_norm, skipped, nonfinite_grads, status) fired, only a diagnostic one (zero_grads, subnormal_grads, "
      "fp8_*). 'margin' columns: the largest deviation / allowance of the runs that track (median, max) and how many "
      "exceed 1/3 (the calibration target).\n")
    P(table(["group", "", "n", "false alarms", "rate", "deciding signal", "only diag.", "margin p50", "margin max",
             "> 1/3"], summarize_correct(correct)))
    n_fa = sum(r["verdict"] != "tracks" for r in correct)
    n_fa_diag = sum(1 for r in correct if r["verdict"] != "tracks" and (lambda fo, fd, st: not fo and fd and not st)(*classify(r)))
    n_fa_status = sum(1 for r in correct if r["verdict"] in STATUS)
    P(f"\n**All correct: {len(correct)}, false alarms {n_fa} ({pct(n_fa, len(correct))}); {n_fa_diag} of them only "
      f"through a diagnostic signal; {n_fa_status} are runs that really raised or went non-finite (status: the setup "
      f"failed, not the rule).**\n")
    fa_rows = [r for r in correct if r["verdict"] != "tracks"]
    if fa_rows:
        P("False alarms:\n")
        P(table(["scenario", "verdict", "signal", "margin", "outcome fired", "diag. fired", "message"],
                [[r["name"], r["verdict"], decider(r), fmt(margin(r)), ",".join(classify(r)[0]) or "—",
                  ",".join(classify(r)[1]) or "—", (r.get("message") or "")[:110].replace("|", "/")]
                 for r in sorted(fa_rows, key=lambda r: r["name"])[:60]]))
        if len(fa_rows) > 60:
            P(f"\n({len(fa_rows) - 60} more)")
        P("")

    # static scale safety: the dynamic scaler of the same workload
    static = [r for r in correct if r["strategy"] == "fp16-static"]
    if static and not args.no_effect:
        import h5py
        lines = []
        unsafe = 0
        for r in static:
            tw = by_key.get((r["_dir"], r["workload"] + "-c-fp16-autocast"))
            if not tw or not tw.get("trajectory"):
                continue
            with h5py.File(os.path.join(r["_dir"], tw["trajectory"]), "r") as f:
                dyn_min = float(np.nanmin(f["steps/loss_scale"][:]))
                dyn_skip = int(np.nansum(f["steps/skipped"][:] > 0.5))
            ratio = dyn_min / (r.get("magnitude") or 1)
            unsafe += ratio < 2 or dyn_skip > 0
            lines.append(ratio)
        P(f"fp16-static scale check: the static scale (2^10..2^14) against the lowest scale the dynamic GradScaler of "
          f"the same workload used (it starts at 2^16 and halves on every overflow): lowest dynamic / static = "
          f"{fmt(min(lines) if lines else None)} (median {fmt(quantile(lines, 0.5))}); {unsafe} of {len(lines)} "
          f"workloads where the dynamic scaler overflowed or came within 2x of the static scale.\n")

    # ---- bugs
    effects = {}
    if not args.no_effect:
        for r in bugs:
            twin = by_key.get((r["_dir"], r["twin"])) if r.get("twin") else None
            try:
                effects[(r["_dir"], r["name"])] = effect_of(r, twin, r["_dir"], tr)
            except (OSError, KeyError) as e:
                effects[(r["_dir"], r["name"])] = (f"n/a: {e}", None, None)
    P("## Planted bugs: detection (caught = verdict ≠ tracks)\n")
    P("'margin' = the deciding signal's deviation / allowance for the catches a signal decided (min / p10 / median); "
      "'status' = error or non-finite decided. 'only diag.': caught with no outcome signal fired. 'no effect': "
      "bugs with no measurable effect (definition below); 'missed, effect 1–6': verdict tracks with an effect above the "
      "FP32 noise but within the 6x the rules allow; 'missed, effect > 6': verdict tracks although the bug moved the "
      "trajectory by more than 6x the noise (or changed the skipped steps).\n")
    classes = collections.OrderedDict()
    for r in sorted(bugs, key=lambda r: r["bug_class"]):
        classes.setdefault(r["bug_class"], []).append(r)
    brows = []
    for c, rs in classes.items():
        caught = [r for r in rs if r["verdict"] != "tracks"]
        by = collections.Counter(decider(r) for r in caught)
        ms = [margin(r) for r in caught if decider(r) != "status" and margin(r) is not None]
        st = sum(decider(r) == "status" for r in caught)
        only_diag = sum(1 for r in caught if (lambda fo, fd, s: not fo and fd and not s)(*classify(r)))
        below3 = sum(1 for m in ms if m < 3)
        noeff = sum(1 for r in rs if measurable(effects.get((r["_dir"], r["name"]), ("n/a", 0, 0))) is False)
        within = [r for r in rs if measurable(effects.get((r["_dir"], r["name"]), ("n/a", 0, 0)))
                  and effect_allowed(r) is not None and effect_allowed(r) <= 1]
        beyond = [r for r in rs if effect_allowed(r) is not None and effect_allowed(r) > 1]
        big = [r for r in beyond if effect_allowed(r) >= 3]
        big3 = sum(1 for r in big if r["verdict"] != "tracks" and (decider(r) == "status" or (margin(r) or 0) >= 3))
        brows.append([c, len(rs), len(caught), pct(len(caught), len(rs)), counter_str(by),
                      f"{fmt(min(ms) if ms else None)} / {fmt(quantile(ms, 0.1))} / {fmt(quantile(ms, 0.5))}",
                      st, below3, only_diag, noeff,
                      f"{sum(r['verdict'] != 'tracks' for r in within)}/{len(within)}",
                      f"{sum(r['verdict'] != 'tracks' for r in beyond)}/{len(beyond)}",
                      f"{big3}/{len(big)}"])
    P(table(["bug class", "n", "caught", "rate", "deciding signals", "margin min / p10 / median", "status",
             "< 3x", "only diag.", "no effect", "caught, effect within allowance", "caught, effect beyond allowance",
             "caught at ≥ 3x, effect ≥ 3x allowance"], brows))
    n_caught = sum(r["verdict"] != "tracks" for r in bugs)
    meas = [r for r in bugs if measurable(effects.get((r["_dir"], r["name"]), ("n/a", 0, 0)))]
    meas_caught = sum(r["verdict"] != "tracks" for r in meas)
    diag_only = sum(1 for r in bugs if r["verdict"] != "tracks" and (lambda fo, fd, s: not fo and fd and not s)(*classify(r)))
    beyond_all = [r for r in bugs if effect_allowed(r) is not None and effect_allowed(r) > 1]
    big_all = [r for r in beyond_all if effect_allowed(r) >= 3]
    big_all3 = sum(1 for r in big_all if r["verdict"] != "tracks" and (decider(r) == "status" or (margin(r) or 0) >= 3))
    P(f"\n**All bugs: {len(bugs)}, caught {n_caught} ({pct(n_caught, len(bugs))}); with a measurable effect "
      f"{len(meas)}, caught {meas_caught} ({pct(meas_caught, len(meas))}); with an effect beyond the allowance "
      f"{len(beyond_all)}, caught {sum(r['verdict'] != 'tracks' for r in beyond_all)}; with an effect ≥ 3x the "
      f"allowance {len(big_all)}, caught at ≥ 3x {big_all3}; {diag_only} caught only through a diagnostic signal.**\n")

    # catches below 3x
    low = [r for r in bugs if r["verdict"] != "tracks" and decider(r) != "status" and (margin(r) or 0) < 3]
    if low:
        P("Caught with a margin < 3x (by class):\n")
        per = collections.defaultdict(list)
        for r in low:
            per[r["bug_class"]].append(f"{r['name']} ({decider(r)} {fmt(margin(r))})")
        for c, names in sorted(per.items()):
            P(f"- {c}: " + ", ".join(sorted(names)))
        P("")

    # misses
    missed = [r for r in bugs if r["verdict"] == "tracks"]
    if missed:
        P("Missed bugs (verdict tracks):\n")
        mrows = []
        for r in sorted(missed, key=lambda r: (r["bug_class"], r["name"])):
            e = effects.get((r["_dir"], r["name"]), ("—", None, None))
            per = e[1] or {}
            mrows.append([r["name"], r["bug_class"], fmt(r.get("magnitude")), (r.get("placement") or "")[:40],
                          fmt(e[0]), " ".join(f"{k}={fmt(v, 2)}" for k, v in per.items()),
                          "yes" if e[2] else ("no" if e[2] is False else "—"),
                          "no effect" if measurable(e) is False else ("MEASURABLE" if measurable(e) else "?"),
                          f"{r.get('max_signal')} {fmt(r.get('max_deviation_bands'))}"])
        P(table(["scenario", "class", "magnitude", "placement", "effect", "per metric", "same skips", "",
                 "closest signal"], mrows))
        P("")

    # no-effect configurations
    P("## No-effect configurations\n")
    P(effect_definition() + "\n")
    noeff = [r for r in bugs if measurable(effects.get((r["_dir"], r["name"]), ("n/a", 0, 0))) is False]
    if noeff:
        P(table(["scenario", "class", "magnitude", "placement", "effect", "verdict", "deciding / closest"],
                [[r["name"], r["bug_class"], fmt(r.get("magnitude")), (r.get("placement") or "")[:50],
                  fmt(effects[(r["_dir"], r["name"])][0]), r["verdict"],
                  f"{decider(r) if r['verdict'] != 'tracks' else r.get('max_signal')} {fmt(margin(r) if r['verdict'] != 'tracks' else r.get('max_deviation_bands'))}"]
                 for r in sorted(noeff, key=lambda r: (r["bug_class"], r["name"]))]))
    else:
        P("(none)" if effects else "(effect not computed)")
    unknown = [r for r in bugs if measurable(effects.get((r["_dir"], r["name"]), ("n/a", 0, 0))) is None]
    if unknown:
        P(f"\nEffect unknown for {len(unknown)} bugs: {counter_str(collections.Counter(str(effects.get((r['_dir'], r['name']), ('n/a',))[0]) for r in unknown))}")
    P("")

    # ---- noise sets
    sets = []
    for label, fname in [("check (training-time binary, the reference's noise runs)", "results-check.jsonl")] + \
            [(f"re-judged: {s}", os.path.join("rejudge", s, "results.jsonl"))
             for s in ("all", "no-skip", "seed", "order", "seed+order", "seed+order+skip", "order+skip", "seed+skip", "skip",
                       "ulp", "all@k=4", "all@ratio_floor=1.05", "more", "2seeds+2orders", "2seeds+order",
                       "seed+2orders")]:
        rs = []
        for d in args.dirs:
            p = os.path.join(d, fname)
            if os.path.exists(p):
                rs += [dict(json.loads(l), _dir=d) for l in open(p) if l.strip()]
        if rs:
            sets.append((label, rs))
    if sets:
        P("## Noise-run sets (spread-count study)\n")
        P("The same trajectories judged against references that keep only some of their noise runs (`run.py "
          "--rejudge`; `all` = the five recorded: ulp+1, ulp-1, seed, order, skip; `no-skip` = the first four, the noise "
          "runs of references recorded before the skip run). 'measurable' = bugs with a measurable "
          "effect (above).\n")
        srows = []
        meas_names = {(r["_dir"], r["name"]) for r in meas}
        for label, rs in sets:
            rs = [r for r in rs if not harness_error(r)]
            c = [r for r in rs if r["kind"] == "correct"]
            b = [r for r in rs if r["kind"] == "bug"]
            fa = [r for r in c if r["verdict"] != "tracks"]
            fa_d = sum(1 for r in fa if (lambda fo, fd, s: not fo and fd and not s)(*classify(r)))
            caught = sum(r["verdict"] != "tracks" for r in b)
            bm = [r for r in b if (r["_dir"], r["name"]) in meas_names]
            bmc = sum(r["verdict"] != "tracks" for r in bm)
            tm = sorted(r.get("max_deviation_bands") or 0 for r in c if r["verdict"] == "tracks")
            srows.append([label, len(c), f"{len(fa)} ({pct(len(fa), len(c))})", fa_d, counter_str(collections.Counter(decider(r) for r in fa)),
                          fmt(tm[-1] if tm else None), sum(1 for m in tm if m > 0.5),
                          f"{caught}/{len(b)} ({pct(caught, len(b))})", f"{bmc}/{len(bm)} ({pct(bmc, len(bm))})"])
        P(table(["verdicts", "correct", "false alarms", "only diag.", "false alarms by signal",
                 "largest margin of a correct run that tracks", "correct runs > 1/2 of their allowance", "bugs caught",
                 "measurable caught"], srows))
        P("")

    text = "\n".join(md) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)

    if args.check:
        bad = []
        for r in correct:
            if r["verdict"] != "tracks":
                bad.append(f"FALSE ALARM {r['name']}: {r['verdict']} ({decider(r)} {fmt(margin(r))}): {r.get('message')}")
        for r in bugs:
            e = effects.get((r["_dir"], r["name"]), ("n/a", None, None))
            ea = effect_allowed(r)
            if r["verdict"] == "tracks" and ea is not None and ea > 1:
                bad.append(f"MISSED {r['name']} ({r['bug_class']}): effect {fmt(e[0])} x noise, {fmt(ea)} x the "
                           f"allowance, closest {r.get('max_signal')} {fmt(r.get('max_deviation_bands'))}")
        for r in herr:
            bad.append(f"NO VERDICT {r['name']}: {r.get('message')}")
        if bad:
            print("ASSERT FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"ASSERT OK: {len(correct)} correct scenarios track; every bug whose effect exceeds the allowance "
              f"caught", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
