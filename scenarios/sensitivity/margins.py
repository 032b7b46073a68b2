#!/usr/bin/env python3
"""The sensitivity suite's margin table, from the summary.json of one or more `ampcheck check` runs.

For every scenario: what it expects, what it got, the signal that decided (or, for a run that tracks, the signal
closest to its allowed deviation) and the margin = deviation / allowed deviation. The calibration target
(docs/TOLERANCE.md): every correct run (expect tracks) at most 1/3 on every signal, every planted bug that is judged
by its signals (expect stalls / diverges) at least 3 on the signal that fired. Runs that end in an error or in
non-finite parameters are decided by their status, not by a margin.

    python3 scenarios/sensitivity/margins.py RUN_DIR [RUN_DIR ...] [--markdown]

Exit code 3 if a scenario fails its expectation or misses the calibration target (1 stays Python's own, for an error).
"""
import json
import os
import sys


def row(c, scale):
    sig = c.get("deciding_signal") or c.get("max_signal") or ""
    margin = c.get("max_deviation_bands")
    expect, verdict = c["expect"], c["verdict"]
    if expect in ("error", "nonfinite"):
        target, ok = "status", c["pass"]
        margin_txt = "-"
    elif expect == "tracks":
        target = "<= 1/3"
        ok = c["pass"] and margin is not None and margin <= 1 / 3
        margin_txt = f"{margin:.3g}" if margin is not None else "-"
    else:
        target = ">= 3"
        ok = c["pass"] and (margin is None or margin >= 3)  # None: infinite (e.g. a binary signal)
        margin_txt = f"{margin:.3g}" if margin is not None else "inf"
    return [scale, c["name"], expect, verdict, sig, margin_txt, target, "ok" if ok else "MISS"], ok


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    md = "--markdown" in sys.argv
    rows, all_ok = [], True
    for d in args:
        s = json.load(open(os.path.join(d, "summary.json")))
        scale = s.get("suite") or os.path.basename(os.path.normpath(d))
        for c in s["scenarios"]:
            r, ok = row(c, scale)
            rows.append(r)
            all_ok &= ok
    head = ["suite", "scenario", "expect", "verdict", "signal", "margin", "target", ""]
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + " --- |" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
        for r in [head] + rows:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
    misses = sum(r[-1] != "ok" for r in rows)
    print(f"\n{len(rows) - misses} of {len(rows)} within the calibration target", file=sys.stderr)
    return 0 if all_ok else BELOW_TARGET


# exit status when some scenario is below its calibration target (a finding, not an error: 1 is Python's own for one)
BELOW_TARGET = 3

if __name__ == "__main__":
    sys.exit(main())
