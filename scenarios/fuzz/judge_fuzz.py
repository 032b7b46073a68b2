#!/usr/bin/env python3
"""Mutation fuzzing of `ampcheck judge`'s readers: mutated HDF5 and JSON-lines trajectory files (byte flips, byte runs
overwritten, truncation, inserted bytes; for JSON lines also values substituted, lines dropped, duplicated or cut)
judged against a valid reference, N of each, in parallel. A crash is an exit by a signal or a code over 128, a hang a
run past --timeout; anything else (0, 1: a verdict; 2: an error naming the file) is handled. Prints a markdown table
and exits 1 on any crash or hang (the offending inputs kept in --keep).

    python3 scenarios/fuzz/judge_fuzz.py --ampcheck build/ampcheck --n 5000 --jobs 2 --keep /tmp/fuzz-crashes
"""
import argparse
import collections
import concurrent.futures as cf
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def make_seeds(work, amp):
    """A reference and two runs (HDF5 and JSON lines) from the example loop's recorder (tiny: 30 steps)."""
    sys.path.insert(0, os.path.join(SRC, "python"))
    sys.path.insert(0, os.path.join(SRC, "examples", "pytorch"))
    import train_amp
    runs = os.path.join(work, "runs")
    os.makedirs(runs)
    for name, noise in (("fp32", None), ("fp32-seed", "seed"), ("fp32-skip", "skip")):
        train_amp.train("fp32", os.path.join(runs, name + ".h5"), steps=30, noise=noise, quiet=True)
    train_amp.train("fp16-autocast-scaler", os.path.join(runs, "run.h5"), steps=30, quiet=True)
    train_amp.train("fp16-autocast-scaler", os.path.join(runs, "run.jsonl"), steps=30, quiet=True)
    subprocess.run([amp, "reference", f"{runs}/fp32.h5", "--spread", f"seed:{runs}/fp32-seed.h5",
                    f"skip:{runs}/fp32-skip.h5", "--out", f"{work}/ref.h5"], check=True, stdout=subprocess.DEVNULL)
    with open(f"{runs}/run.h5", "rb") as f:
        h5 = f.read()
    with open(f"{runs}/run.jsonl", "rb") as f:
        jl = f.read()
    return h5, jl


def mutate_bytes(data, rng):
    b = bytearray(data)
    kind = rng.choice(["flip", "flips", "run", "truncate", "insert", "zero"])
    if kind == "flip":
        i = rng.randrange(len(b)); b[i] ^= 1 << rng.randrange(8)
    elif kind == "flips":
        for _ in range(rng.randint(2, 32)):
            i = rng.randrange(len(b)); b[i] ^= 1 << rng.randrange(8)
    elif kind == "run":
        i = rng.randrange(len(b)); n = rng.randint(1, 64)
        b[i:i + n] = bytes(rng.randrange(256) for _ in range(min(n, len(b) - i)))
    elif kind == "truncate":
        b = b[:rng.randrange(len(b))]
    elif kind == "insert":
        i = rng.randrange(len(b)); b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    else:
        i = rng.randrange(len(b)); n = rng.randint(1, 512); b[i:i + n] = bytes(len(b[i:i + n]))
    return bytes(b), kind


def mutate_jsonl(data, rng):
    lines = data.split(b"\n")
    kind = rng.choice(["bytes", "drop", "dup", "cut", "value", "value", "key"])
    if kind == "bytes":
        return mutate_bytes(data, rng)
    i = rng.randrange(len(lines))
    if kind == "drop":
        del lines[i]
    elif kind == "dup":
        lines.insert(i, lines[i])
    elif kind == "cut":
        lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
    else:
        try:
            obj = json.loads(lines[i])
        except Exception:  # noqa: BLE001
            return mutate_bytes(data, rng)
        if isinstance(obj, dict) and obj:
            k = rng.choice(list(obj))
            if kind == "key":
                obj[k + rng.choice(["x", "", "_"])] = obj.pop(k)
            else:
                obj[k] = rng.choice([None, "nan", -1, 0, 1e308, -1e308, 2**70, "", [], {}, True, "Infinity",
                                     "a" * 1000, [1, 2], {"a": 1}])
            lines[i] = json.dumps(obj).encode()
    return b"\n".join(lines), kind


def judge_one(amp, ref, path, out, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run([amp, "judge", path, "--reference", ref, "--out", out, "--force"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
        rc = p.returncode
        err = p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    shutil.rmtree(out, ignore_errors=True)
    return rc, err, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--n", type=int, default=500, help="mutated files of each kind (HDF5, JSON lines)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--keep", help="copy crashing / hanging inputs here")
    a = ap.parse_args()
    amp = os.path.abspath(a.ampcheck)
    work = tempfile.mkdtemp(prefix="ampcheck-fuzz-")
    try:
        h5, jl = make_seeds(work, amp)
        rng = random.Random(a.seed)
        cases = []
        for i in range(a.n):
            data, kind = mutate_bytes(h5, rng)
            cases.append(("hdf5", kind, f"{work}/m{i}.h5", data))
            data, kind = mutate_jsonl(jl, rng)
            cases.append(("jsonl", kind, f"{work}/m{i}.jsonl", data))
        for _, _, path, data in cases:
            with open(path, "wb") as f:
                f.write(data)
        results = collections.Counter()
        bad = []
        t0 = time.time()
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            futs = {ex.submit(judge_one, amp, f"{work}/ref.h5", c[2], c[2] + ".out", a.timeout): c for c in cases}
            for fut in cf.as_completed(futs):
                fmt, kind, path, _ = futs[fut]
                rc, err, _ = fut.result()
                crash = rc == "hang" or (isinstance(rc, int) and (rc < 0 or rc > 128))
                results[(fmt, "crash/hang" if crash else str(rc))] += 1
                if rc == 2 and path in err:
                    results[(fmt, "2-names-file")] += 1
                elif rc == 2 and a.keep:  # an error that does not name the file: kept too
                    os.makedirs(a.keep, exist_ok=True)
                    shutil.copy(path, a.keep)
                if crash:
                    bad.append((fmt, kind, path, rc, err[-300:]))
                    if a.keep:
                        os.makedirs(a.keep, exist_ok=True)
                        shutil.copy(path, a.keep)
        el = time.time() - t0
        print(f"# `ampcheck judge` over mutated trajectory files\n")
        print(f"Command: `python3 scenarios/fuzz/judge_fuzz.py --ampcheck build/ampcheck --n {a.n} --jobs {a.jobs} "
              f"--seed {a.seed}`: {len(cases)} judge runs in {el / 60:.1f} min.\n")
        print("| format | exit 0 (verdict PASS) | exit 1 (verdict FAIL) | exit 2 (an error) | of which the message "
              "names the file | crash or hang |")
        print("| --- | --- | --- | --- | --- | --- |")
        for fmt in ("hdf5", "jsonl"):
            print(f"| {fmt} | {results[(fmt, '0')]} | {results[(fmt, '1')]} | {results[(fmt, '2')]} | "
                  f"{results[(fmt, '2-names-file')]} | {results[(fmt, 'crash/hang')]} |")
        other = {k: v for k, v in results.items() if k[1] not in ("0", "1", "2", "2-names-file", "crash/hang")}
        if other:
            print(f"\nOther exit codes: {other}")
        for b in bad[:20]:
            print(f"\n- CRASH {b[0]} ({b[1]}): exit {b[3]}: {b[4]}")
        sys.exit(1 if bad else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
