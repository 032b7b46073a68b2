#!/usr/bin/env python3
"""The detection table of `ampcheck validate` (docs/VALIDATE.md): planted faults against goldens recorded on this
machine, each judged bit for bit and statistically, one markdown table.

    python3 scenarios/validate/detection.py --ampcheck build/ampcheck --out reports/validate/detection-cpu.md

Goldens and FP32 references go to a scratch directory (the committed FP32 references of this device class are
copied there; the goldens are recorded fresh, so the bitwise comparison applies). Faults: a bit flip of one element of
a parameter (after backward, before the step) or of a gradient at step 10, at exponent and mantissa bit positions,
persistent (in the run and its replays) and transient (the run only); and the stack faults (TF32, non-deterministic
algorithms, reduced-precision reductions, bf16 inside FP32 matmuls) on every scenario of the suite. A fault is
*caught bitwise* when the run is not bit for bit the golden's, *caught statistically* when the statistical verdict
against the FP32 references is not `tracks`. Exits non-zero if a run errors (exit 2) or the unplanted suite is not
identical.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

SUITE = ["fp32-gpt", "bf16-autocast-gpt", "fp16-autocast-gpt", "fp32-mlp-sgd"]
PARAM = "h.0.mlp.c_fc.weight"
BITS = [30, 28, 26, 23, 22, 20, 16, 10, 0]  # fp32: 30..23 exponent, 22..0 mantissa


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--out", required=True, help="the markdown table (written atomically; refused if it exists, unless --force)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--references", help="copy the FP32 references from here (default: the source's references/)")
    ap.add_argument("--bits", default=",".join(map(str, BITS)), help="bit positions to flip (default: %(default)s)")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    a = ap.parse_args()
    if os.path.exists(a.out) and not a.force:
        sys.exit(f"{a.out}: exists; refusing to overwrite. HINT: pass --force to replace it")
    amp = os.path.abspath(a.ampcheck)
    src = a.source
    bits = [int(b) for b in a.bits.split(",")]
    ref_src = a.references or os.path.join(src, "references")
    work = tempfile.mkdtemp(prefix="ampcheck-detection-")
    try:
        refs = os.path.join(work, "refs")
        os.makedirs(refs)
        for cls in os.listdir(ref_src):
            if cls != "validate":
                shutil.copytree(os.path.join(ref_src, cls), os.path.join(refs, cls))
        run([amp, "validate", "--record", "--references", refs])
        rows = []
        device = ["?"]

        def validate(name, scenario, plants):
            out = os.path.join(work, "runs", name)
            cmd = [amp, "validate", os.path.join(src, "scenarios", "validate", scenario + ".yaml"), "--references", refs,
                   "--out", out, "--force"]
            for p in plants:
                cmd += ["--plant", p]
            rc = run(cmd)
            with open(os.path.join(out, "summary.json")) as f:
                summ = json.load(f)
            row = summ["scenarios"][0]
            device[0] = f"{summ.get('device_name', '?')} ({summ.get('device_class', '?')}), libtorch {summ.get('libtorch_version', '?')}"
            v = row["validation"]
            return rc, row, v

        rc, _, v = validate("clean", "fp32-gpt", [])
        if not v["identical"]:
            sys.exit(f"the unplanted run is not identical to the golden just recorded: {v['first_difference']}")
        for target in ("param", "grad"):
            for bit in bits:
                for transient in (False, True):
                    if transient and bit not in (30, 0):
                        continue
                    plant = f"bitflip:{target}:{PARAM}:0:{bit}@10" + (":transient" if transient else "")
                    rc, row, v = validate(f"{target}-{bit}-{transient}", "fp32-gpt", [plant])
                    rows.append((plant, "fp32-gpt", v, row))
        for fault in ("tf32", "nondeterministic", "reduced-reduction", "matmul-bf16"):
            for sc in SUITE:
                rc, row, v = validate(f"{fault}-{sc}", sc, [fault])
                rows.append((fault, sc, v, row))
        lines = ["| fault | scenario | caught bitwise | first difference | replays | statistical verdict | caught statistically |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        for plant, sc, v, row in rows:
            caught_b = "yes" if not v["identical"] else "no"
            first = v["first_difference"].replace("|", "/")
            rep = v.get("replay") or "—"
            stat = v.get("statistical_verdict") or "—"
            caught_s = "—" if stat == "—" else ("no" if stat == "tracks" else "yes")
            lines.append(f"| `{plant}` | {sc} | {caught_b} | {first} | {rep} | {stat} | {caught_s} |")

        def smallest(target, key):
            caught = [b for (p, sc, v, row) in rows for b in bits
                      if p == f"bitflip:{target}:{PARAM}:0:{b}@10" and
                      (not v["identical"] if key == "b" else v.get("statistical_verdict") not in ("tracks", "", None))]
            return min(caught) if caught else None
        summary = []
        for target in ("param", "grad"):
            sb, ss = smallest(target, "b"), smallest(target, "s")
            summary.append(f"- bit flips of one {target} element (`{PARAM}`, element 0, step 10): smallest bit caught "
                           f"bitwise: {sb if sb is not None else 'none'}; statistically: {ss if ss is not None else 'none'}")
        text = "\n".join(["# `ampcheck validate`: detection of planted faults", "",
                          f"Command: `python3 scenarios/validate/detection.py --ampcheck build/ampcheck --out {a.out}"
                          + (f" --bits {a.bits}" if a.bits != ",".join(map(str, BITS)) else "") + "`; "
                          "goldens recorded on the same machine just before, so every comparison is bitwise.", "",
                          f"Device: {device[0]}.", ""]
                         + summary + [""] + lines) + "\n"
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
