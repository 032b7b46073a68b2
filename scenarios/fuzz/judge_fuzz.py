#!/usr/bin/env python3
"""Mutation fuzzing of `ampcheck judge`'s readers: mutated HDF5 and JSON-lines trajectory files (byte flips, byte runs
overwritten, truncation, inserted bytes; for JSON lines also values substituted, lines dropped, duplicated or cut)
judged against a valid reference, N of each, in parallel; then --text-n of each whose string attributes carry planted
bytes that are not UTF-8 or are terminal escapes (Latin-1, stray continuation bytes, overlong forms, surrogates, cut
sequences, ESC / C1 sequences, CR), in strategy, expect, status and the labels. A crash is an exit by a signal or a
code over 128, a hang a run past --timeout; an exit without the file named is any other exit than 0 / 1 / 2, or a 2
whose message does not name the file; a run is "not printable" when its terminal output or a report it wrote
(summary.json read with Python's strict UTF-8 json, junit.xml, summary.md, report.html) holds a byte that is not UTF-8
or a control character other than newline and tab. Prints a markdown table and exits 1 on any of these (the
offending inputs kept in --keep).

    python3 scenarios/fuzz/judge_fuzz.py --ampcheck build/ampcheck --n 5000 --jobs 2 --keep /tmp/fuzz-crashes
    python3 scenarios/fuzz/judge_fuzz.py --ampcheck build/ampcheck --n 0 --text-n 600 --jobs 2   # attribute text only
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
    sys.path.insert(0, os.path.join(SRC, "python", "src"))
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


# Bytes planted into attribute text: not UTF-8, or printable only as escapes (docs/ROBUSTNESS.md, "Text from files").
PLANTS = [b"\xe9", b"caf\xe9", b"\xe4", b"\x80", b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
          b"\xe2\x82", b"\xf0\x9f\x98", b"\x1b[31m", b"\x1b]0;title\x07", b"\x1b[2J", b"\xc2\x9b2J", b"\r", b"\x7f",
          b"\x08", b"<script>", b"|", b"&amp;"]
TEXT_ATTRS = ["strategy", "expect", "status", "perturbation", "workload", "run_key", "note", "torch_version",
              "cuda_version", "timing_method", "autocast_dtype", "param_dtype", "error", "events", "device_class"]


def planted(value, rng):
    """value with 1-3 planted byte strings at random places (or replacing it)."""
    v = bytearray(value if rng.random() < 0.8 else b"")
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(v))
        v[i:i] = rng.choice(PLANTS)
    return bytes(v)


def mutate_h5_text(src, dst, rng):
    """The seed run with string attributes (existing or new, fixed- or variable-length) carrying planted bytes."""
    import h5py
    import numpy as np
    shutil.copy(src, dst)
    kinds = []
    with h5py.File(dst, "r+") as f:
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(TEXT_ATTRS + list(f.attrs))
            old = f.attrs.get(key, b"")
            old = old.encode("utf-8", "surrogateescape") if isinstance(old, str) else bytes(old) if isinstance(old, (bytes, np.bytes_)) else b""
            new = planted(old, rng)
            if key in f.attrs:
                del f.attrs[key]
            if rng.random() < 0.5:
                f.attrs[key] = np.bytes_(new)  # fixed-length, as ampcheck writes
                kinds.append(key)
            else:  # variable-length, as h5py writes a str (the bytes as they are, whatever the declared charset)
                f.attrs.create(key, new, dtype=h5py.string_dtype("ascii" if rng.random() < 0.5 else "utf-8"))
                kinds.append(key + "(vlen)")
        if rng.random() < 0.2:  # an attribute name that is not UTF-8
            f.attrs[planted(b"note", rng)] = np.bytes_(b"x")
            kinds.append("name")
    return ",".join(kinds)


def mutate_jsonl_text(data, rng):
    """The header's attributes with planted bytes, raw in the JSON strings (or as \\u escapes for control characters)."""
    lines = data.split(b"\n")
    try:
        header = json.loads(lines[0])
    except Exception:  # noqa: BLE001
        header = {}
    if not (isinstance(header, dict) and "format" in header):
        header = {"format": "ampcheck-trajectory", "format_version": 1}
        lines.insert(0, b"")
    attrs = {k: str(v).encode() for k, v in header.get("attributes", {}).items()}
    keys = []
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(TEXT_ATTRS)
        attrs[key] = planted(attrs.get(key, b""), rng)
        keys.append(key)

    def raw(b):
        out = b'"'
        for c in b:
            out += b"\\" + bytes([c]) if c in b'"\\' else b"\\u%04x" % c if c < 0x20 else bytes([c])
        return out + b'"'
    body = b", ".join(raw(k.encode()) + b": " + raw(v) for k, v in attrs.items())
    lines[0] = (b'{"format": "ampcheck-trajectory", "format_version": 1, "attributes": {' + body + b"}}")
    return b"\n".join(lines), ",".join(keys)


def printable(data):
    """True when data is UTF-8 without control characters other than newline and tab."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in text)


def judge_one(amp, ref, path, out, timeout):
    """(exit code or "hang", stderr text, seconds, whether the terminal output and the reports are printable)"""
    t0 = time.perf_counter()
    ok_text = True
    try:
        p = subprocess.run([amp, "judge", path, "--reference", ref, "--out", out, "--force"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        rc = p.returncode
        err = p.stderr.decode(errors="replace")
        ok_text = printable(p.stdout) and printable(p.stderr)
        for name in ("summary.json", "junit.xml", "summary.md", "report.html"):
            if os.path.exists(os.path.join(out, name)):
                with open(os.path.join(out, name), "rb") as f:
                    data = f.read()
                ok_text &= printable(data)
                if name == "summary.json":
                    try:
                        json.loads(data.decode("utf-8"))
                    except Exception:  # noqa: BLE001
                        ok_text = False
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    shutil.rmtree(out, ignore_errors=True)
    return rc, err, time.perf_counter() - t0, ok_text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--n", type=int, default=500, help="mutated files of each kind (HDF5, JSON lines)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--text-n", type=int, default=0,
                    help="files of each kind whose string attributes carry bytes that are not UTF-8 or are escapes")
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
        text_rng = random.Random(a.seed + 1000)  # its own stream: the byte mutations above stay those of earlier runs
        for i in range(a.text_n):
            kind = mutate_h5_text(f"{work}/runs/run.h5", f"{work}/t{i}.h5", text_rng)
            cases.append(("hdf5-text", kind, f"{work}/t{i}.h5", None))
            data, kind = mutate_jsonl_text(jl, text_rng)
            cases.append(("jsonl-text", kind, f"{work}/t{i}.jsonl", data))
        for _, _, path, data in cases:
            if data is not None:
                with open(path, "wb") as f:
                    f.write(data)
        results = collections.Counter()
        bad = []
        t0 = time.time()
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            futs = {ex.submit(judge_one, amp, f"{work}/ref.h5", c[2], c[2] + ".out", a.timeout): c for c in cases}
            for fut in cf.as_completed(futs):
                fmt, kind, path, _ = futs[fut]
                rc, err, _, ok_text = fut.result()
                crash = rc == "hang" or (isinstance(rc, int) and (rc < 0 or rc > 128))
                results[(fmt, "crash/hang" if crash else str(rc))] += 1
                unnamed = crash or rc not in (0, 1, 2) or (rc == 2 and path not in err)
                results[(fmt, "unnamed")] += unnamed
                results[(fmt, "unprintable")] += not ok_text
                if rc == 2 and path in err:
                    results[(fmt, "2-names-file")] += 1
                if (unnamed or not ok_text) and not crash:
                    bad.append((fmt, kind, path, rc, err[-300:]))
                    if a.keep:  # an error that does not name the file, or raw bytes out: kept too
                        os.makedirs(a.keep, exist_ok=True)
                        shutil.copy(path, a.keep)
                if crash:
                    bad.append((fmt, kind, path, rc, err[-300:]))
                    if a.keep:
                        os.makedirs(a.keep, exist_ok=True)
                        shutil.copy(path, a.keep)
        el = time.time() - t0
        print(f"# `ampcheck judge` over mutated trajectory files\n")
        print(f"Command: `python3 scenarios/fuzz/judge_fuzz.py --ampcheck build/ampcheck --n {a.n} --text-n {a.text_n} "
              f"--jobs {a.jobs} --seed {a.seed}`: {len(cases)} judge runs in {el / 60:.1f} min.\n")
        print("| format | exit 0 (verdict PASS) | exit 1 (verdict FAIL) | exit 2 (an error) | of which the message "
              "names the file | crash or hang | exit without the file named | terminal or report not printable |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for fmt in ("hdf5", "jsonl", "hdf5-text", "jsonl-text"):
            if not any(k[0] == fmt for k in results):
                continue
            print(f"| {fmt} | {results[(fmt, '0')]} | {results[(fmt, '1')]} | {results[(fmt, '2')]} | "
                  f"{results[(fmt, '2-names-file')]} | {results[(fmt, 'crash/hang')]} | {results[(fmt, 'unnamed')]} | "
                  f"{results[(fmt, 'unprintable')]} |")
        other = {k: v for k, v in results.items()
                 if k[1] not in ("0", "1", "2", "2-names-file", "crash/hang", "unnamed", "unprintable")}
        if other:
            print(f"\nOther exit codes: {other}")
        for b in bad[:20]:
            print(f"\n- FINDING {b[0]} ({b[1]}): exit {b[3]}: {b[4]!r}")
        sys.exit(1 if bad else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
