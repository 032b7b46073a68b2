#!/usr/bin/env python3
"""The live guard measured on the real HF Trainer (python/tests/hf_util.py's tiny GPT-2, CPU): prints the markdown of
reports/python/guard.md.

1. Stop: a run of 1,000 steps (fp16 autocast with a CPU GradScaler handed to accelerate) with an fp16 blow-up planted
   at step 120 (the first MLP's weights x 1e6: its fp16 activations overflow from then on), AmpcheckCallback with
   reference=, judge_every=20, stop_on=("nonfinite", "diverges"): the step it stopped at, the file's status and
   `ampcheck judge`'s verdict on it.
2. No false stop: SEEDS correct runs (model seed and data seed i; fp16 + GradScaler and bf16 autocast alternating) with
   the same guard over their first STEPS steps: how many were stopped, how many judgements said anything but tracks.
3. Cost: the judge's time per call (in-process where the package has its native core, else the `ampcheck` command),
   and the same Trainer run with the guard at judge_every=50 against without it (both at the default probe setting).

    AMPCHECK_BIN=build/ampcheck python3 python/tools/guard_check.py --seeds 20 > reports/python/guard.md
"""
import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import torch  # noqa: E402

import hf_util  # noqa: E402
from ampcheck.guard import default_judge  # noqa: E402
from ampcheck.recorder import DEFAULT_PROBE_EVERY  # noqa: E402

STOP_ON = ("nonfinite", "diverges")


def quiet(fn, *args, **kwargs):
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # the Trainer's metrics line
        return fn(*args, **kwargs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200, help="steps of each correct run")
    ap.add_argument("--reference-steps", type=int, default=400)
    ap.add_argument("--judge-every", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    d = tempfile.mkdtemp()
    t0 = time.time()
    kw = dict(steps=a.reference_steps, probe_every=DEFAULT_PROBE_EVERY)
    quiet(hf_util.make_reference, d, hf_util.run, **kw)
    ref = f"{d}/reference.h5"
    guard = dict(reference=ref, judge_every=a.judge_every, stop_on=STOP_ON)
    print(f"# The live guard on the HF Trainer (tiny GPT-2, CPU)\n\nCommand: `python3 python/tools/guard_check.py "
          f"{' '.join(sys.argv[1:])}`; reference: FP32 + seed + data-order runs of {a.reference_steps} steps; guard: "
          f"judge_every={a.judge_every}, stop_on={STOP_ON}; judge: {default_judge().__name__}; "
          f"torch {torch.__version__}.\n")

    # 1. the planted blow-up
    cb, _ = quiet(hf_util.run, d, "blow", steps=1000, fp16=True, cpu_scaler=True, blow_at=120, guard=guard,
                  probe_every=DEFAULT_PROBE_EVERY)
    g = cb.recorder.guard
    final = g.final
    r, row = hf_util.judge(d, "blow")
    print("## 1. fp16 blow-up planted at step 120 of 1,000\n")
    print("| stopped after step | judgements (steps: verdict) | file status | `ampcheck judge` on the file |")
    print("| --- | --- | --- | --- |")
    print(f"| {final.steps if final else 'not stopped'} | "
          f"{', '.join(f'{j.steps}: {j.verdict}' for j in g.judgements)} | "
          f"{'interrupted' if final else 'completed'} | {row['verdict']} |\n")
    print(f"Message: {final.message if final else '-'}\n")

    # 2. correct runs
    rows, stopped, not_tracks, judgements = [], 0, 0, 0
    for i in range(a.seeds):
        strategy = dict(fp16=True, cpu_scaler=True) if i % 2 == 0 else dict(bf16=True)
        cb, _ = quiet(hf_util.run, d, f"ok{i}", steps=a.steps, seed=2000 + i, data_seed=3000 + i, guard=guard,
                      probe_every=DEFAULT_PROBE_EVERY, **strategy)
        g = cb.recorder.guard
        judgements += len(g.judgements)
        bad = [j for j in g.judgements if j.verdict != "tracks"]
        not_tracks += len(bad)
        stopped += g.stopped is not None
        rows.append(f"| {2000 + i} | {'fp16 + GradScaler' if i % 2 == 0 else 'bf16'} | {len(g.judgements)} | "
                    f"{'; '.join(f'{j.steps}: {j.verdict}' for j in bad) or 'all tracks'} | "
                    f"{'STOPPED' if g.stopped else 'no'} |")
    print(f"## 2. {a.seeds} correct runs ({a.steps} steps each)\n")
    print(f"Stopped: {stopped} of {a.seeds}; judgements other than tracks: {not_tracks} of {judgements}.\n")
    print("| seed | strategy | judgements | not tracks | stopped |\n| --- | --- | --- | --- | --- |")
    print("\n".join(rows) + "\n")

    # 3. cost
    judge = default_judge()
    times = []
    for _ in range(10):
        t = time.perf_counter()
        judge(f"{d}/ok0.h5", ref)
        times.append((time.perf_counter() - t) * 1e3)
    per_call = statistics.median(times)
    with_guard, without = [], []
    for rep in range(3):  # interleaved
        for name, extra in (("off", {}), ("on", dict(guard=dict(reference=ref, judge_every=50)))):
            t = time.perf_counter()
            quiet(hf_util.run, d, f"cost-{name}", steps=200, probe_every=DEFAULT_PROBE_EVERY, bf16=True, **extra)
            (with_guard if name == "on" else without).append((time.perf_counter() - t) / 200 * 1e3)
    on, off = statistics.median(with_guard), statistics.median(without)
    print("## 3. Cost\n")
    print(f"One judgement of a {a.steps}-step partial run: median {per_call:.1f} ms (10 calls). At judge_every=50 that "
          f"is {per_call / 50:.2f} ms per step on average, whatever the step time; steps not judged do nothing more. "
          f"The same HF run (bf16, 200 steps, 3 runs each, interleaved): {off:.1f} ms/step without the guard, "
          f"{on:.1f} ms/step with judge_every=50 ({(on / off - 1) * 100:+.1f}%).\n")
    print(f"(total {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
