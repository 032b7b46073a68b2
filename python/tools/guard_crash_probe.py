"""Where the native judge crashes a training process (issue 51, finding 1): records a reference (FP32 + a seed run) and
an fp16 run of the nanoGPT-style loop (python/tools/overhead.py's model), then judges the run in fresh processes that
differ in one thing each — the `ampcheck judge` command (no h5py, no CUDA in the process), the in-process judge with
and without h5py imported first, with and without CUDA initialised, the snapshot read in-process or contained — and
prints each one's exit status and the HDF5 libraries mapped into it. A case that dies by a signal is the mechanism.

    python3 python/tools/guard_crash_probe.py --device cuda --size gpt2 --steps 60 --out DIR
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src"))

CASE = r"""
import os, sys, json
sys.path.insert(0, {src!r})
what = set({what!r})
if "h5py" in what:
    import h5py  # noqa: F401  (h5py first: its HDF5 mapped before the native core's)
import torch
if "cuda" in what:
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import ampcheck
ref = ampcheck.load_reference({ref!r})
j = ampcheck.judge({run!r}, ref, written_here="here" in what)
libs = sorted(l.split()[-1] for l in open("/proc/self/maps") if "libhdf5" in l and "_hl" not in l.split()[-1])
print("verdict", j.verdict, "steps", j.steps, "| hdf5:", " ".join(sorted(set(libs))))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ampcheck", default=os.environ.get("AMPCHECK_BIN", "build/ampcheck"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import overhead  # the loop and model of the guard's cost case

    ref_runs = [os.path.join(a.out, "ref-fp32.h5"), os.path.join(a.out, "ref-seed.h5")]
    run = os.path.join(a.out, "run-fp16.h5")
    overhead.nanogpt_loop(a.size, a.device, "fp32", a.steps, 0, 10, ref_runs[0])
    overhead.nanogpt_loop(a.size, a.device, "fp32", a.steps, 0, 10, ref_runs[1], seed=2, perturbation="seed")
    overhead.nanogpt_loop(a.size, a.device, "fp16", a.steps, 0, 10, run)
    ref = os.path.join(a.out, "reference.h5")
    r = subprocess.run(
        [a.ampcheck, "reference", ref_runs[0], "--spread", f"seed:{ref_runs[1]}", "--out", ref, "--force"],
        capture_output=True,
        text=True,
    )
    print(f"ampcheck reference rc={r.returncode} {r.stdout.strip().splitlines()[-1:] if r.stdout else r.stderr[-300:]}")
    cases = [("cli", None)]
    for what in (["here"], ["h5py", "here"], ["h5py"], ["cuda", "here"], ["h5py", "cuda", "here"], ["h5py", "cuda"]):
        if "cuda" in what and a.device != "cuda":
            continue
        cases.append(("+".join(what), what))
    for name, what in cases:
        if what is None:
            cmd = [a.ampcheck, "judge", run, "--reference", ref, "--out", os.path.join(a.out, "cli-judge"), "--force"]
        else:
            code = CASE.format(src=os.path.join(HERE, "..", "src"), what=what, ref=ref, run=run)
            cmd = [sys.executable, "-X", "faulthandler", "-c", code]
        p = subprocess.run(cmd, capture_output=True, text=True)
        out = (p.stdout + p.stderr).strip().splitlines()
        tail = [x for x in out if x.strip()][-3:]
        print(f"case {name}: rc={p.returncode}", *tail, sep="\n   ", flush=True)


if __name__ == "__main__":
    main()
