#!/usr/bin/env python3
"""The longer fuzz run: every libFuzzer target of the `sanitize` build (harness/fuzz) for --seconds each, from the
committed corpus and regression inputs, new inputs kept in a scratch corpus (not in the source tree). Prints a markdown
table (target, seconds, executions, executions/s, corpus size, findings) and exits 1 on any finding (the crashing
inputs are in --artifacts).

    cmake --preset sanitize && cmake --build build-sanitize
    python3 scenarios/fuzz/run_fuzzers.py --build build-sanitize --seconds 300 --jobs 2
"""
import argparse
import concurrent.futures as cf
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
TARGETS = ["scenario", "jsonl", "hdf5", "summary", "cli"]


def fuzz(build, target, seconds, scratch, artifacts):
    exe = os.path.join(build, "harness", "fuzz", f"fuzz_{target}")
    corpus = os.path.join(scratch, target)
    os.makedirs(corpus, exist_ok=True)
    dirs = [os.path.join(SRC, "harness", "fuzz", "corpus", target)]
    reg = os.path.join(SRC, "harness", "fuzz", "regressions", target)
    if os.path.isdir(reg):
        dirs.append(reg)
    # AMPCHECK_READ_TIMEOUT_S: an HDF5 file libhdf5 loops on ends its reading child after 2 s (the containment's
    # alarm), so fuzz_hdf5 spends its time on new inputs
    env = dict(os.environ, OMP_NUM_THREADS="1", ASAN_OPTIONS="detect_leaks=0", AMPCHECK_READ_TIMEOUT_S="2",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    p = subprocess.run([exe, f"-max_total_time={seconds}", "-timeout=30", "-rss_limit_mb=4096", "-print_final_stats=1",
                        f"-artifact_prefix={artifacts}/{target}-", corpus] + dirs,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    log = p.stdout.decode(errors="replace")
    execs = re.search(r"stat::number_of_executed_units: (\d+)", log)
    # crash-, leak-, timeout-, oom- artifacts are findings; slow-unit- ones are inputs past 10 s (libhdf5 looping
    # until the reading child's alarm): counted apart
    every = sorted(glob.glob(f"{artifacts}/{target}-*"))
    found = [f for f in every if "-slow-unit-" not in f]
    slow = len(every) - len(found)
    return target, p.returncode, int(execs.group(1)) if execs else 0, len(os.listdir(corpus)), found, slow, log[-3000:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SRC, "build-sanitize"))
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--artifacts", default=None)
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="ampcheck-fuzz-corpus-")
    artifacts = a.artifacts or tempfile.mkdtemp(prefix="ampcheck-fuzz-artifacts-")
    os.makedirs(artifacts, exist_ok=True)
    rows = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for r in ex.map(lambda t: fuzz(a.build, t, a.seconds, scratch, artifacts), a.targets.split(",")):
            rows.append(r)
    print("| target | seconds | executions | executions / s | corpus after | findings | slow inputs (> 10 s, no finding) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    bad = False
    for target, rc, execs, corpus, found, slow, log in rows:
        print(f"| fuzz_{target} | {a.seconds} | {execs} | {execs / a.seconds:.0f} | {corpus} | "
              f"{len(found)}{' (exit ' + str(rc) + ')' if rc else ''} | {slow} |")
        if rc or found:
            bad = True
            sys.stderr.write(f"--- fuzz_{target}: exit {rc}, findings {found}\n{log}\n")
    print(f"\nArtifacts (findings): {artifacts}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
