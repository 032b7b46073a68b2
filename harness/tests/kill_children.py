#!/usr/bin/env python3
"""Children die with their parent (issue 39): `ampcheck check --jobs 2` on two scenarios is SIGKILLed while its
children run; within 2 s no process it started may remain. Two ways in:

  training: two scenarios with committed references, the parent killed at a random moment once both children
      (`ampcheck check FILE --jobs 1`) are seen — each child is then loading its reference or training;
  reading: the same, each scenario's reference replaced by a file on which libhdf5 loops
      (harness/tests/data/corrupt-hdf5/hang-a.h5): each child waits on its contained reader (a forked grandchild),
      so the kill leaves two generations below the parent.

The processes are found by an environment marker (AMPCHECK_KILL_TEST_TAG, inherited by every descendant), read from
/proc/<pid>/environ. Prints a markdown table (kills, children alive at the kill, orphans 2 s later); exit 1 if any
orphan remains (they are then killed).

    python3 harness/tests/kill_children.py --ampcheck build/ampcheck --kills 5
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def tagged(tag):
    """pids (other than our own) whose environment carries AMPCHECK_KILL_TEST_TAG=tag."""
    needle = f"AMPCHECK_KILL_TEST_TAG={tag}".encode() + b"\0"
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read():
                    with open(f"/proc/{d}/stat") as s:  # a zombie is an exit not yet reaped, not a running process
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            out.append(int(d))
        except OSError:
            pass
    return out


def one_kill(amp, argv, env, rng, tag, min_children):
    """Starts argv, waits for min_children descendants, SIGKILLs it at a random moment after; returns (alive at the
    kill, orphans 2 s later)."""
    proc = subprocess.Popen([amp] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(env, AMPCHECK_KILL_TEST_TAG=tag))
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if len([p for p in tagged(tag) if p != proc.pid]) >= min_children:
            break
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.3))
    alive = [p for p in tagged(tag) if p != proc.pid]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.time()
    left = alive
    while time.time() - t0 < 2.0:
        left = tagged(tag)
        if not left:
            break
        time.sleep(0.05)
    for p in left:  # do not leave them running after the test
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(alive), len(left)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--kills", type=int, default=5, help="SIGKILLs per way in")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    amp = os.path.abspath(a.ampcheck)
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ampcheck-kill-children-")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    scenarios = [os.path.join(SRC, "scenarios", s) for s in ("fp32.yaml", "fp16-autocast-scaler.yaml")]
    try:
        # the reading way in: a copy of the references with these scenarios' files replaced by the looping file
        hang = os.path.join(work, "hang-refs")
        shutil.copytree(os.path.join(SRC, "references"), hang, ignore=shutil.ignore_patterns("validate"))
        out = subprocess.run([amp, "check"] + scenarios + ["--device", "cpu", "--jobs", "1", "--out",
                             os.path.join(work, "probe")], capture_output=True, text=True, env=env)
        refs = set()
        for row in json.load(open(os.path.join(work, "probe", "summary.json")))["scenarios"]:
            with h5py.File(os.path.join(work, "probe", row["trajectory_file"]), "r") as f:
                refs.add(f.attrs["reference"].decode() if isinstance(f.attrs["reference"], bytes)
                         else f.attrs["reference"])
        if not refs:  # (the two share one FP32 reference)
            print(f"FAIL: no reference file named in the probe run ({out.stderr[-300:]})")
            sys.exit(1)
        for r in refs:
            rel = os.path.join(*r.split(os.sep)[-2:])  # <device class>/<key>.h5
            shutil.copy(os.path.join(HERE, "data", "corrupt-hdf5", "hang-a.h5"), os.path.join(hang, rel))
        ways = {
            "training": (["check"] + scenarios + ["--device", "cpu", "--jobs", "2"], 2),
            "reading (hanging HDF5 reader)": (["check"] + scenarios + ["--device", "cpu", "--jobs", "2",
                                                                      "--references", hang], 4),
        }
        rows, orphans_total = [], 0
        for name, (argv, min_children) in ways.items():
            alive_total = orphans = 0
            for k in range(a.kills):
                out_dir = os.path.join(work, f"out-{k}")
                alive, left = one_kill(amp, argv + ["--out", out_dir, "--force"], env, rng, uuid.uuid4().hex,
                                       min_children)
                alive_total += alive
                orphans += left
            orphans_total += orphans
            rows.append((name, a.kills, alive_total, orphans))
        print("| way in | SIGKILLs of `check --jobs 2` | processes below it alive at the kills | left 2 s later |")
        print("| --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
        if any(r[2] == 0 for r in rows):
            print("FAIL: no child was alive at any kill of one way in: the test shows nothing")
            sys.exit(1)
        print(f"\n{orphans_total} orphaned processes")
        sys.exit(1 if orphans_total else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
