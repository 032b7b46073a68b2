#!/usr/bin/env python3
"""Outputs survive kills and re-runs: `judge`, `reference`, `record`, `compare`, `report`, `check` and `run`, each
SIGKILLed at random moments while they replace an earlier complete output (--force), leave either that previous
output, byte for byte, or a complete new one — never a partial file, never a half-written run directory that a
later command reads as valid. After each kill the output is inspected:

  run directory (judge, check, run): the same files with the same bytes as before, or a complete run — no INCOMPLETE
      marker, summary.json parses, every scenario's trajectory file opens as HDF5 with all its datasets readable,
      report.html ends with </html>; a staging directory (.<name>.partial-<pid>) may be left beside it, and `compare`
      refuses it (its INCOMPLETE marker);
  file (reference, record's reference files): the same bytes as before, or an HDF5 file whose datasets all read;
  report (report.html, summary.md in place): the same bytes, or complete;
  compare (writes nothing): both run directories unchanged.

Then one complete run of the command must succeed and leave no stale staging directory or temporary (*.tmp.<pid>)
beside its outputs. Prints a markdown table; exit 1 on any violation.

    python3 harness/tests/kill_outputs.py --ampcheck build/ampcheck --kills 8
"""
import argparse
import glob
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def digest_tree(path):
    """{relative path: md5} of every file under path (a file: {'': md5}); None if path does not exist."""
    if not os.path.exists(path):
        return None
    if os.path.isfile(path):
        return {"": hashlib.md5(open(path, "rb").read()).hexdigest()}
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = hashlib.md5(open(p, "rb").read()).hexdigest()
    return out


def h5_complete(path):
    import h5py
    try:
        with h5py.File(path, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    obj[()]
            f.visititems(visit)
            dict(f.attrs)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{path}: not a complete HDF5 file ({e})"


def run_dir_complete(d, reports=True):
    if os.path.exists(os.path.join(d, "INCOMPLETE")):
        return f"{d}: INCOMPLETE marker in the published directory"
    if not reports:  # `run`: trajectories only
        h5 = glob.glob(os.path.join(d, "*.h5"))
        if not h5:
            return f"{d}: no trajectory"
        for f in h5:
            why = h5_complete(f)
            if why:
                return why
        return None
    try:
        s = json.load(open(os.path.join(d, "summary.json")))
    except Exception as e:  # noqa: BLE001
        return f"{d}/summary.json: {e}"
    for sc in s.get("scenarios", []):
        tf = sc.get("trajectory_file")
        if tf:
            why = h5_complete(os.path.join(d, tf))
            if why:
                return why
    html = open(os.path.join(d, "report.html"), "rb").read().rstrip()
    if not html.endswith(b"</html>"):
        return f"{d}/report.html: cut short"
    return None


def leftovers(path):
    parent, name = os.path.split(path.rstrip("/"))
    return sorted(glob.glob(os.path.join(parent, f".{name}.partial-*")) +
                  glob.glob(os.path.join(parent, "**", "*.tmp.*"), recursive=True))


class Case:
    def __init__(self, name, argv, output, kind, check_extra=None):
        self.name, self.argv, self.output, self.kind, self.check_extra = name, argv, output, kind, check_extra

    def inspect(self, before):
        now = digest_tree(self.output)
        if now == before:
            return "previous"
        if now is None:
            return "none" if before is None else "VIOLATION: the previous output is gone"
        if self.kind in ("dir", "trajectories"):
            why = run_dir_complete(self.output, reports=self.kind == "dir")
        elif self.kind == "files":
            why = None
            for rel in now:
                p = os.path.join(self.output, rel) if rel else self.output
                if p.endswith(".h5"):
                    why = why or h5_complete(p)
                if ".tmp." in rel:
                    continue  # a killed write's temporary: not an output (removed by the next write)
        elif self.kind == "report":
            why = None
            for f in ("report.html", "summary.md"):
                b = open(os.path.join(self.output, f), "rb").read()
                if f == "report.html" and not b.rstrip().endswith(b"</html>"):
                    why = f"{f}: cut short"
        else:  # compare: nothing may change
            why = "the run directories changed"
        return f"VIOLATION: {why}" if why else "new"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--kills", type=int, default=8, help="SIGKILLs per command")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="comma-separated command names")
    a = ap.parse_args()
    amp = os.path.abspath(a.ampcheck)
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ampcheck-kill-")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        # the example loop's recorded runs and a reference from them (30 steps): judge_fuzz.py's seeds
        sys.path.insert(0, os.path.join(SRC, "scenarios", "fuzz"))
        from judge_fuzz import make_seeds
        make_seeds(work, amp)
        runs, ref = os.path.join(work, "runs"), os.path.join(work, "ref.h5")
        sc = os.path.join(SRC, "scenarios", "fp32.yaml")
        sc2 = os.path.join(SRC, "scenarios", "fp16-autocast-scaler.yaml")
        subprocess.run([amp, "check", sc, sc2, "--device", "cpu", "--jobs", "1", "--steps", "20", "--out",
                        f"{work}/A"], stdout=subprocess.DEVNULL, env=env)
        shutil.copytree(f"{work}/A", f"{work}/B")
        cases = [
            Case("judge", [amp, "judge", f"{runs}/run.h5", "--reference", ref, "--out", f"{work}/J", "--force"],
                 f"{work}/J", "dir"),
            Case("reference", [amp, "reference", f"{runs}/fp32.h5", "--spread", f"seed:{runs}/fp32-seed.h5",
                               f"skip:{runs}/fp32-skip.h5", "--out", f"{work}/R.h5", "--force"], f"{work}/R.h5", "files"),
            Case("record", [amp, "record", sc, "--device", "cpu", "--steps", "30", "--references", f"{work}/refs",
                            "--force"], f"{work}/refs", "files"),
            Case("compare", [amp, "compare", f"{work}/A", f"{work}/B"], f"{work}/A", "compare"),
            Case("report", [amp, "report", f"{work}/B", "--force"], f"{work}/B", "report"),
            Case("check", [amp, "check", sc, "--device", "cpu", "--jobs", "1", "--out", f"{work}/C", "--force"],
                 f"{work}/C", "dir"),  # (the scenario's own steps: its committed reference)
            Case("run", [amp, "run", sc, "--device", "cpu", "--steps", "100", "--out", f"{work}/U", "--force"],
                 f"{work}/U", "trajectories"),
        ]
        if a.only:
            cases = [c for c in cases if c.name in a.only.split(",")]
        rows, violations = [], []
        for c in cases:
            t0 = time.perf_counter()
            p = subprocess.run(c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            full = time.perf_counter() - t0
            if p.returncode != 0:
                violations.append(f"{c.name}: the first complete run failed ({p.returncode}): {p.stderr.decode()[-400:]}")
                continue
            counts = {"previous": 0, "new": 0, "none": 0}
            left_by_kills = 0
            for k in range(a.kills):
                before = digest_tree(c.output)
                proc = subprocess.Popen(c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
                # half at any moment, half in the last sixth of a run, where the outputs are written
                time.sleep(rng.uniform(0, full * 1.1) if k % 2 == 0 else rng.uniform(full * 0.85, full * 1.02))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                if c.name == "compare":
                    outcome = "previous" if digest_tree(f"{work}/A") == before and \
                        digest_tree(f"{work}/B") is not None else "VIOLATION: the run directories changed"
                else:
                    outcome = c.inspect(before)
                if outcome.startswith("VIOLATION"):
                    violations.append(f"{c.name}: {outcome}")
                else:
                    counts[outcome] += 1
                left_by_kills += len(leftovers(c.output)) if c.name != "compare" else 0
            left = leftovers(c.output) if c.name != "compare" else []
            # a staging directory a kill left is refused as a run directory by compare / report
            for stale in [x for x in left if ".partial-" in x]:
                r = subprocess.run([amp, "report", stale, "--force"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, env=env)
                if os.path.exists(os.path.join(stale, "INCOMPLETE")) and (
                        r.returncode != 2 or b"INCOMPLETE" not in r.stderr):
                    violations.append(f"{c.name}: report read the staging directory {stale} ({r.returncode})")
            # one more complete run: succeeds and clears what the kills left
            p = subprocess.run(c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            after = leftovers(c.output) if c.name != "compare" else []
            if p.returncode not in (0, 1):
                violations.append(f"{c.name}: the run after the kills failed ({p.returncode}): {p.stderr.decode()[-400:]}")
            if after:
                violations.append(f"{c.name}: left behind after a complete run: {after}")
            rows.append((c.name, a.kills, counts["previous"], counts["new"], counts["none"], left_by_kills, full))
        print("| command | SIGKILLs | previous output intact | complete new output | no output (none before) | "
              "kills after which a staging dir or temporary was left (removed by the next run) | one run, s |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]:.1f} |")
        for v in violations:
            print(f"\nVIOLATION {v}")
        print(f"\n{len(violations)} violations")
        sys.exit(1 if violations else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
