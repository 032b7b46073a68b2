#!/usr/bin/env python3
"""Runs a generated calibration campaign (scenarios/campaign/README.md) and collects one results file.

    python3 scenarios/campaign/run.py DIR --ampcheck /tmp/campaign-bin/ampcheck [--jobs 2] [--shard-workloads 3]
    python3 scenarios/campaign/run.py DIR --collect                 # results.jsonl again from the shards
    python3 scenarios/campaign/run.py DIR --rejudge --ampcheck build/ampcheck [--sets all,seed,order,seed+order,ulp]

Training: `ampcheck record` writes each workload's FP32 reference (+ 5 noise runs) into DIR/refs, then `ampcheck
check --jobs 1` judges the scenarios of a few workloads at a time into DIR/shards/<k>; --jobs such processes run at
once (one intra-op thread each). Resumable: a reference that exists is kept, a shard whose summary.json holds every
scenario is skipped, so a killed run restarts where it stopped. `check` exits 1 when a scenario fails its `expect:`
(data here); 2 is an error. Results: DIR/results.jsonl, one row per scenario: the manifest's metadata, the summary
row's fields (unknown keys passed through), `signals` keyed by name, the run's `status` / `error` from its trajectory,
paths of its trajectory and reference (relative to DIR).

Re-judging (no training): `ampcheck judge` of every trajectory in DIR/shards against its reference, or against a copy
of it that keeps only some noise runs (DIR/refsets/<set>/): sets `all` (the reference as recorded), `seed`, `order`,
`seed+order`, `ulp` (ulp+1 and ulp-1), `no-skip` (the four of earlier references), `seed+order+skip`, `order+skip`,
`seed+skip`, and with references recorded by `record --more-noise` (--refs) `more` and its subsets. Each set's verdicts go to DIR/rejudge/<set>/<workload>/ and
DIR/rejudge/<set>/results.jsonl; the `all` set also rebuilds DIR/results.jsonl (the check-time file is kept once
as DIR/results-check.jsonl).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

NOISE_SETS = {
    "all": None,
    "seed": ["seed"],
    "order": ["order"],
    "seed+order": ["seed", "order"],
    "ulp": ["ulp+1", "ulp-1"],
    # the skip run (the first optimizer step skipped, as a GradScaler skips an overflowing step), alone and with others
    "no-skip": ["ulp+1", "ulp-1", "seed", "order"],
    "seed+order+skip": ["seed", "order", "skip"],
    "order+skip": ["order", "skip"],
    "seed+skip": ["seed", "skip"],
    "skip": ["skip"],
    # with references recorded by `ampcheck record --more-noise` (--refs refs-more): six noise runs
    "more": None,
    "2seeds+2orders": ["seed", "seed-2", "order", "order-2"],
    "2seeds+order": ["seed", "seed-2", "order"],
    "seed+2orders": ["seed", "order", "order-2"],
}
MORE_NOISE_SETS = ("more", "2seeds+2orders", "2seeds+order", "seed+2orders")

_children = {}  # pid -> Popen, only processes this script started


def log(msg):
    print(time.strftime("[%H:%M:%S] ") + msg, flush=True)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_campaign(d):
    manifest = read_jsonl(os.path.join(d, "manifest.jsonl"))
    workloads = read_jsonl(os.path.join(d, "workloads.jsonl"))
    return manifest, workloads


def summary_names(path):
    try:
        with open(path) as f:
            return {r["name"] for r in json.load(f)["scenarios"]}
    except (OSError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# a small task pool: at most `jobs` processes at once; a task starts when the tasks it needs have finished

class Task:
    def __init__(self, name, cmd, log_path, needs=(), est=1.0, ok_codes=(0,), done=None):
        self.name, self.cmd, self.log_path, self.needs, self.est = name, cmd, log_path, set(needs), est
        self.ok_codes, self.done_check = ok_codes, done
        self.proc = self.start = None
        self.rc = None


def run_pool(tasks, jobs, env, label):
    pending = [t for t in tasks]
    finished = {}
    running = []
    total_est = sum(t.est for t in tasks) or 1.0
    done_est = 0.0
    t0 = time.time()
    failures = 0
    while pending or running:
        # start what is ready
        for t in list(pending):
            if len(running) >= jobs:
                break
            if all(n in finished for n in t.needs):
                pending.remove(t)
                if t.done_check and t.done_check():
                    finished[t.name] = 0
                    done_est += t.est
                    continue
                os.makedirs(os.path.dirname(t.log_path), exist_ok=True)
                with open(t.log_path, "w") as lf:
                    t.proc = subprocess.Popen(t.cmd, stdout=lf, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True)
                _children[t.proc.pid] = t.proc
                t.start = time.time()
                running.append(t)
        if not running and pending and not any(all(n in finished for n in t.needs) for t in pending):
            raise RuntimeError("task dependencies cannot be met: " + ", ".join(t.name for t in pending))
        time.sleep(0.2)
        for t in list(running):
            rc = t.proc.poll()
            if rc is None:
                continue
            running.remove(t)
            _children.pop(t.proc.pid, None)
            t.rc = rc
            finished[t.name] = rc
            done_est += t.est
            el = time.time() - t0
            eta = el / done_est * (total_est - done_est) if done_est > 0 else 0
            ok = rc in t.ok_codes
            failures += not ok
            log(f"{label} {t.name}: {'done' if ok else f'FAILED (exit {rc}, see {t.log_path})'} in "
                f"{time.time() - t.start:.1f} s — {len(finished)}/{len(tasks)} tasks, elapsed {el / 60:.1f} min, "
                f"eta {eta / 60:.1f} min")
    return finished, failures


def stop_children(signum, frame):
    for pid, p in list(_children.items()):
        try:
            os.killpg(pid, signal.SIGTERM)  # the process group of a child this script started
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


# ---------------------------------------------------------------------------------------------------------------
# collection

def h5_attrs(path, keys=("status", "error", "reference")):
    import h5py
    out = {}
    try:
        with h5py.File(path, "r") as f:
            for k in keys:
                if k in f.attrs:
                    v = f.attrs[k]
                    out[k] = v.decode() if isinstance(v, bytes) else str(v)
    except OSError:
        return None
    return out


def result_row(man, srow, d, run_dir, traj_source):
    """One results row: manifest metadata + the summary row (unknown keys passed through)."""
    row = {}
    for k, v in srow.items():
        if k == "signals":
            continue
        if k in ("strategy", "expect", "name"):
            k = {"strategy": "strategy_name", "expect": "expect_summary", "name": "name"}[k]
        row[k] = v
    row.update(man)
    row["signals"] = {g["name"]: g for g in srow.get("signals", [])}
    row["run_dir"] = os.path.relpath(run_dir, d)
    traj = os.path.join(traj_source, man["name"] + ".h5")
    attrs = h5_attrs(traj) if os.path.exists(traj) else None
    if attrs is None:
        row["status"] = "no-trajectory"  # the scenario raised before training (e.g. no reference)
        row["trajectory"] = None
    else:
        row["status"] = attrs.get("status", "")
        if attrs.get("error"):
            row["error"] = attrs["error"]
        row["trajectory"] = os.path.relpath(traj, d)
        ref = attrs.get("reference")
        if ref:
            row["reference"] = os.path.relpath(ref, d) if os.path.isabs(ref) else ref
    return row


def shard_plan(workloads, per_shard):
    ids = [f"w{w['id']:03d}" for w in workloads]
    return [ids[i:i + per_shard] for i in range(0, len(ids), per_shard)]


def collect(d, manifest, shards):
    by_name = {m["name"]: m for m in manifest}
    rows, missing = [], 0
    for k, wids in enumerate(shards):
        sdir = os.path.join(d, "shards", str(k))
        try:
            with open(os.path.join(sdir, "summary.json")) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            missing += sum(m["workload"] in wids for m in manifest)
            continue
        for srow in summary["scenarios"]:
            man = by_name.get(srow["name"])
            if man is None:
                continue
            r = result_row(man, srow, d, sdir, sdir)
            r["shard"] = k
            rows.append(r)
    write_jsonl(os.path.join(d, "results.jsonl"), rows)
    return rows, missing


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------------
# training

def train(args, manifest, workloads):
    d = args.dir
    shards = shard_plan(workloads, args.shard_workloads)
    files = {}
    for m in manifest:
        files.setdefault(m["workload"], []).append(os.path.join(d, m["file"]))
    est = {f"w{w['id']:03d}": w.get("est_cost_s", 10.0) for w in workloads}
    refs = os.path.abspath(os.path.join(d, "refs"))
    amp = os.path.abspath(args.ampcheck)
    tasks = []
    for k, wids in enumerate(shards):
        for wid in wids:
            def rec_done(wid=wid):
                return os.path.exists(os.path.join(d, "logs", f"record-{wid}.ok"))
            cmd = ["bash", "-c", 'set -o pipefail; "$@" && touch "$OK"', "record", amp, "record", "--references",
                   refs, "--device", "cpu"] + files[wid]
            t = Task(f"record-{wid}", cmd, os.path.join(d, "logs", f"record-{wid}.log"),
                     est=est[wid] * 5 / 15, ok_codes=(0,), done=rec_done)
            t.env_ok = os.path.join(d, "logs", f"record-{wid}.ok")
            t.cmd = ["env", f"OK={t.env_ok}"] + cmd
            tasks.append(t)
        sdir = os.path.join(d, "shards", str(k))
        names = {m["name"] for m in manifest if m["workload"] in wids}

        def shard_done(sdir=sdir, names=names):
            got = summary_names(os.path.join(sdir, "summary.json"))
            return got is not None and names <= got
        shard_files = [f for wid in wids for f in files[wid]]
        cmd = [amp, "check", "--references", refs, "--device", "cpu", "--out", os.path.abspath(sdir), "--jobs", "1",
               "--force"] + shard_files
        tasks.append(Task(f"shard-{k}", cmd, os.path.join(d, "logs", f"shard-{k}.log"),
                          needs=[f"record-{w}" for w in wids], est=sum(est[w] for w in wids) * 10 / 15,
                          ok_codes=(0, 1), done=shard_done))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    n_scen = len(manifest)
    log(f"{d}: {len(workloads)} workloads, {n_scen} scenarios in {len(shards)} shards; {args.jobs} processes at "
        f"once; ampcheck {amp}")
    t0 = time.time()
    finished, failures = run_pool(tasks, args.jobs, env, "train")
    rows, missing = collect(d, manifest, shards)
    log(f"training done in {(time.time() - t0) / 60:.1f} min: {len(rows)} result rows in {d}/results.jsonl"
        + (f", {missing} scenarios without a result" if missing else "") + (f", {failures} failed tasks" if failures else ""))
    # a workload whose FP32 reference could not be recorded: say so (its scenarios report 'no FP32 reference')
    for t in tasks:
        if t.name.startswith("record-") and t.rc not in (None, 0):
            tail = open(t.log_path).read().strip().splitlines()[-1:] if os.path.exists(t.log_path) else []
            log(f"  {t.name}: no reference: {' '.join(tail)}")
    return 0 if failures == 0 else 2


# ---------------------------------------------------------------------------------------------------------------
# re-judging against noise-run subsets

def make_refset(src, dst, labels):
    import h5py
    import numpy as np
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp.h5"
    shutil.copyfile(src, tmp)
    with h5py.File(tmp, "r+") as f:
        have = list(f["noise"].keys())
        missing = [l for l in labels if l not in have]
        if missing:
            raise RuntimeError(f"{src}: no noise run {missing} (has {have})")
        for l in have:
            if l not in labels:
                del f["noise"][l]
        f.attrs["noise_runs"] = ",".join(labels)
        loss = f["steps/loss"][:]
        spread = np.zeros_like(loss)
        for l in labels:
            spread = np.maximum(spread, np.abs(f[f"noise/{l}/loss"][:] - loss))
        if "series/loss_spread" in f:
            f["series/loss_spread"][...] = spread
    os.replace(tmp, dst)


def rejudge(args, manifest, workloads):
    d = args.dir
    amp = os.path.abspath(args.ampcheck)
    sets = args.sets.split(",")
    for s in sets:
        if s not in NOISE_SETS:
            sys.exit(f"--sets: unknown set '{s}' (known: {', '.join(NOISE_SETS)})")
    check_rows = read_jsonl(os.path.join(d, "results-check.jsonl") if os.path.exists(
        os.path.join(d, "results-check.jsonl")) else os.path.join(d, "results.jsonl"))
    if not os.path.exists(os.path.join(d, "results-check.jsonl")):
        shutil.copyfile(os.path.join(d, "results.jsonl"), os.path.join(d, "results-check.jsonl"))
    by_wl = {}
    for r in check_rows:
        by_wl.setdefault(r["workload"], []).append(r)
    tol = list(args.tolerance or [])
    tag = ("@" + ",".join(tol)) if tol else ""  # a sweep's verdicts go to rejudge/<set>@<overrides>/
    tol_args = [a for kv in tol for a in ("--tolerance", kv)]
    tasks = []
    for s in sets:
        for wid, rows in sorted(by_wl.items()):
            runs = [os.path.join(d, r["trajectory"]) for r in rows if r.get("trajectory")]
            refs = {r["reference"] for r in rows if r.get("reference")}
            if not runs or len(refs) != 1:
                continue
            ref = os.path.join(d, refs.pop())
            if s in MORE_NOISE_SETS:  # the same reference recorded with six noise runs (--refs, default refs-more)
                ref = os.path.join(d, args.refs, os.path.relpath(ref, os.path.join(d, "refs")))
            if NOISE_SETS[s] is not None:
                dst = os.path.join(d, "refsets", s, os.path.basename(ref))
                if not os.path.exists(dst):
                    make_refset(ref, dst, NOISE_SETS[s])
                ref = dst
            out = os.path.join(d, "rejudge", s + tag, wid)
            names = {os.path.basename(r)[:-3] for r in runs}

            def done(out=out, names=names):
                return not args.force and (summary_names(os.path.join(out, "summary.json")) or set()) >= names
            cmd = [amp, "judge"] + runs + ["--reference", os.path.abspath(ref), "--out", os.path.abspath(out), "--force"]
            cmd += tol_args
            tasks.append(Task(f"{s}{tag}/{wid}", cmd, os.path.join(d, "logs", "rejudge", s + tag, wid + ".log"), est=len(runs),
                              ok_codes=(0, 1), done=done))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log(f"re-judging {len(check_rows)} runs against {len(sets)} noise set(s) with {amp}")
    _, failures = run_pool(tasks, args.jobs, env, "judge")
    by_name = {m["name"]: m for m in manifest}
    check_by_name = {r["name"]: r for r in check_rows}
    for s in sets:
        rows = []
        judged = set()
        for wid in sorted(by_wl):
            out = os.path.join(d, "rejudge", s + tag, wid)
            try:
                with open(os.path.join(out, "summary.json")) as f:
                    summary = json.load(f)
            except (OSError, ValueError):
                continue
            for srow in summary["scenarios"]:
                man = by_name.get(srow["name"])
                if man is None:
                    continue
                shard_dir = os.path.join(d, check_by_name[srow["name"]]["run_dir"])
                r = result_row(man, srow, d, out, shard_dir)
                r["noise_set"] = s
                r["tolerance"] = ",".join(tol)
                r["rejudged"] = True
                r["shard"] = check_by_name[srow["name"]].get("shard")
                rows.append(r)
                judged.add(srow["name"])
        # scenarios with no trajectory (raised before training) keep their check-time row
        for r in check_rows:
            if r["name"] not in judged:
                rows.append(dict(r, noise_set=s, rejudged=False))
        rows.sort(key=lambda r: r["name"])
        write_jsonl(os.path.join(d, "rejudge", s + tag, "results.jsonl"), rows)
        if s == "all" and not tag:
            write_jsonl(os.path.join(d, "results.jsonl"), rows)
        log(f"{s}{tag}: {len(judged)} re-judged, {len(rows) - len(judged)} kept from check -> {d}/rejudge/{s}{tag}/results.jsonl"
            + (" and results.jsonl" if s == "all" and not tag else ""))
    return 0 if failures == 0 else 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="campaign directory (written by generate.py)")
    ap.add_argument("--ampcheck", default=None, help="the ampcheck binary (default: build/ampcheck of this tree)")
    ap.add_argument("--jobs", type=int, default=2, help="processes at once (default 2)")
    ap.add_argument("--shard-workloads", type=int, default=3, help="workloads per `check` process (default 3)")
    ap.add_argument("--collect", action="store_true", help="only rebuild results.jsonl from the shards")
    ap.add_argument("--rejudge", action="store_true", help="re-judge the trajectories (no training)")
    ap.add_argument("--sets", default=",".join(s for s in NOISE_SETS if s not in MORE_NOISE_SETS),
                    help="noise sets for --rejudge (default: every set but those of --more-noise references)")
    ap.add_argument("--force", action="store_true", help="--rejudge: judge again where results exist")
    ap.add_argument("--refs", default="refs-more",
                    help="--rejudge of the sets more, 2seeds+2orders, 2seeds+order, seed+2orders: the folder inside DIR "
                         "with the references recorded by `ampcheck record --more-noise` (default refs-more)")
    ap.add_argument("--tolerance", action="append", metavar="KEY=VALUE",
                    help="--rejudge: a verdict constant other than the default (ampcheck judge --tolerance), e.g. k=4; "
                         "repeatable; the verdicts go to DIR/rejudge/<set>@<overrides>/")
    args = ap.parse_args()
    if args.ampcheck is None:
        args.ampcheck = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "ampcheck")
    signal.signal(signal.SIGTERM, stop_children)
    signal.signal(signal.SIGINT, stop_children)
    manifest, workloads = load_campaign(args.dir)
    if args.collect:
        rows, missing = collect(args.dir, manifest, shard_plan(workloads, args.shard_workloads))
        log(f"{len(rows)} rows in {args.dir}/results.jsonl; {missing} scenarios without a result")
        return 0
    if not os.access(args.ampcheck, os.X_OK):
        sys.exit(f"--ampcheck {args.ampcheck}: not an executable")
    if args.rejudge:
        return rejudge(args, manifest, workloads)
    return train(args, manifest, workloads)


if __name__ == "__main__":
    sys.exit(main())
