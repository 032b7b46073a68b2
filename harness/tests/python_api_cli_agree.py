"""The Python package's in-process API against its command line, on the example loop's recorded runs (CTest
cpu.python_package runs this with the fresh venv's python, from outside the source tree, after `pip install ./python`):

  - ampcheck.make_reference and `ampcheck reference` build the reference from the same FP32 runs;
  - ampcheck.judge(run, ref) and `ampcheck judge RUN... --reference REF --out DIR` give the same row for every run
    (and ampcheck.judge(..., written_here=True), the live guard's in-process read, the same as the contained one) —
    verdict, PASS / FAIL, deciding signal, margin, message, every signal's comparison and warning — compared as
    summary.json's fields, exactly (numbers to the last bit: both are the same C++ use case, usecases::judge_recording,
    whose numbers summary.json writes with round-trip precision); the CLI's printed table shows the same message;
  - the first N steps: ampcheck.judge(steps=N) against `ampcheck judge --first-steps N`;
  - errors: a file that is not a trajectory, a reference that exists without force=True, an unknown planted fault for
    validate: ampcheck.AmpcheckError whose message is the command's exit-2 message (naming the file), nothing written.

Usage: python_api_cli_agree.py AMPCHECK_COMMAND RUNS_DIR WORK_DIR FP32 SEED SKIP RUN...   (run names, files RUNS_DIR/NAME.h5)
"""
import json
import math
import os
import subprocess
import sys

import ampcheck

FIRST_STEPS = 25  # a partial judgement: fewer than the runs' 60 steps, more than the verdict's smoothing window


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def command(args, expect_rc=(0,)):
    r = subprocess.run([AMPCHECK] + args, capture_output=True, text=True)
    if r.returncode not in expect_rc:
        fail(f"`ampcheck {' '.join(args)}` exited {r.returncode}, expected {expect_rc}:\n{r.stdout}{r.stderr}")
    return r


def same(a, b):
    """JSON values equal, NaN (null) included, floats to the last bit."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def compare_rows(what, api, cli_row, cli_stdout):
    row = api.row
    if not same(row, cli_row):
        diff = sorted(k for k in set(row) | set(cli_row) if not same(row.get(k), cli_row.get(k)))
        fail(f"{what}: ampcheck.judge's row differs from the command's summary.json in {diff}: "
             + "; ".join(f"{k}: api {row.get(k)!r} / cli {cli_row.get(k)!r}" for k in diff))
    margin = cli_row["max_deviation_bands"]
    if api.verdict != cli_row["verdict"] or api.message != cli_row["message"] or api.passed != cli_row["pass"] or \
            not same(api.margin, math.nan if margin is None else float(margin)):
        fail(f"{what}: Judgement fields differ from the row: {api}")
    # the printed table: the row's verdict and margin (3 significant digits, "-" when not computed), and a failing
    # run's message on its FAIL line
    shown = "-" if math.isnan(api.margin) else f"{api.margin:.3g}"
    table_row = [line.split() for line in cli_stdout.splitlines() if line.split()[:1] == [api.name]]
    if len(table_row) != 1 or api.verdict not in table_row[0] or shown not in table_row[0]:
        fail(f"{what}: the command's table has no row with verdict {api.verdict} and margin {shown}:\n{cli_stdout}")
    if not api.passed and f"  FAIL {api.name}: {api.message}" not in cli_stdout:
        fail(f"{what}: the command does not print the message {api.message!r}:\n{cli_stdout}")
    print(f"  {what}: {api.verdict} (margin {api.margin:.4g}, deciding {api.deciding_signal or '-'}): same as the CLI")


def judge_both(runs, ref, out, extra_cli=(), **api_kwargs):
    r = command(["judge"] + [os.path.join(RUNS, n + ".h5") for n in runs] + ["--reference", ref, "--out", out]
                + list(extra_cli), expect_rc=(0, 1))
    with open(os.path.join(out, "summary.json")) as f:
        rows = {row["name"]: row for row in json.load(f)["scenarios"]}
    reference = ampcheck.load_reference(ref)
    passed = []
    for n in runs:
        api = ampcheck.judge(os.path.join(RUNS, n + ".h5"), reference, **api_kwargs)
        by_path = ampcheck.judge(os.path.join(RUNS, n + ".h5"), ref, **api_kwargs)
        if not same(api.row, by_path.row):
            fail(f"{n}: judging against a loaded Reference and against its path differ")
        # the live guard's in-process read (written_here: no forked reader) reads the same file the same way
        here = ampcheck.judge(os.path.join(RUNS, n + ".h5"), reference, written_here=True, **api_kwargs)
        if not same(api.row, here.row):
            fail(f"{n}: judging with written_here=True (read in-process) differs from the contained read")
        compare_rows(f"{n}{' ' + ' '.join(extra_cli) if extra_cli else ''}", api, rows[n], r.stdout)
        passed.append(api.passed)
    if (r.returncode == 0) != all(passed):
        fail(f"the command exited {r.returncode}, the API's runs passed: {passed}")
    return rows


def same_error(what, call, cli_args):
    try:
        call()
    except ampcheck.AmpcheckError as e:
        message = str(e)
    else:
        fail(f"{what}: no AmpcheckError")
    r = command(cli_args, expect_rc=(2,))
    if r.stderr.strip() != "ampcheck: " + message:
        fail(f"{what}: the API's error {message!r} is not the command's {r.stderr.strip()!r}")
    print(f"  {what}: AmpcheckError, the command's message: {message}")
    return message


def main():
    global AMPCHECK, RUNS
    AMPCHECK, RUNS, work, fp32, seed, skip = sys.argv[1:7]
    judged = sys.argv[7:]
    os.chdir(work)
    h5 = lambda n: os.path.join(RUNS, n + ".h5")  # noqa: E731

    # the reference, both ways; each way's judgement of a run is the same
    command(["reference", h5(fp32), "--spread", "seed:" + h5(seed), "skip:" + h5(skip), "--out", "ref-cli.h5"])
    info = ampcheck.make_reference(h5(fp32), spread=["seed:" + h5(seed), "skip:" + h5(skip)], out="ref-api.h5")
    if info.noise_labels != ("seed", "skip") or info.steps <= FIRST_STEPS:
        fail(f"make_reference: {info}")
    a = ampcheck.judge(h5(judged[0]), "ref-api.h5")
    b = ampcheck.judge(h5(judged[0]), "ref-cli.h5")
    if not same(a.row, b.row):
        fail("the API's reference and the command's judge the same run differently")
    print(f"reference: ampcheck.make_reference and `ampcheck reference` agree ({info.steps} steps, {info.noise_labels})")

    # every run, whole and its first steps
    judge_both(judged, "ref-cli.h5", "judged")
    judge_both(judged, "ref-cli.h5", "judged-first", ("--first-steps", str(FIRST_STEPS)), steps=FIRST_STEPS)
    partial = ampcheck.judge(h5(judged[0]), "ref-cli.h5", steps=FIRST_STEPS)
    if not partial.partial or partial.steps != FIRST_STEPS:
        fail(f"steps={FIRST_STEPS}: not judged as a partial run of {FIRST_STEPS} steps: {partial}")

    # errors: the command's message, nothing written
    with open("not-a-run.h5", "w") as f:
        f.write("not HDF5\n")
    m = same_error("a file that is not a trajectory", lambda: ampcheck.judge("not-a-run.h5", "ref-cli.h5"),
                   ["judge", "not-a-run.h5", "--reference", "ref-cli.h5", "--out", "never"])
    if "not-a-run.h5" not in m or os.path.exists("never"):
        fail("the error does not name the file, or something was written")
    before = os.path.getmtime("ref-api.h5")
    m = same_error("an existing reference without force",
                   lambda: ampcheck.make_reference(h5(fp32), spread=["seed:" + h5(seed)], out="ref-api.h5"),
                   ["reference", h5(fp32), "--spread", "seed:" + h5(seed), "--out", "ref-api.h5"])
    if "ref-api.h5" not in m or os.path.getmtime("ref-api.h5") != before:
        fail("the refusal does not name the reference, or replaced it")
    same_error("validate with an unknown planted fault",
               lambda: ampcheck.validate(out="validated", plants=["no-such-fault"], log=None),
               ["validate", "--plant", "no-such-fault", "--out", "validated"])
    if os.path.exists("validated"):
        fail("validate wrote its run directory for bad input")
    print("in-process API and command line agree: PASS")


if __name__ == "__main__":
    main()
