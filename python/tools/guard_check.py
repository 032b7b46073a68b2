#!/usr/bin/env python3
"""The live guard measured on the real HF Trainer (python/tests/hf_util.py's tiny GPT-2, CPU): prints the markdown of
reports/python/guard.md.

1. Stop: a run of 1,000 steps (fp16 autocast with a CPU GradScaler handed to accelerate) with an fp16 blow-up planted
   at step 120 (the first MLP's weights x 1e6: its fp16 activations overflow from then on), AmpcheckCallback with
   reference=, judge_every=20, stop_on=("nonfinite", "diverges"): the step it stopped at, the file's status and
   `ampcheck judge`'s verdict on it.
2. No false stop: SEEDS correct runs (model seed and data seed i) with the same guard over their first STEPS steps:
   how many were stopped, how many judgements said anything but tracks. --seeds-loop hf: the Trainer above (fp16 +
   GradScaler and bf16 autocast alternating, against the reference above); mlp: tests/guard_util.py's plain loop,
   per seed the fp16 autocast + GradScaler run of the same training as that seed's own reference (its FP32 run and a
   seed and a data-order noise run).
3. Cost: the judge's time per call (in-process where the package has its native core, else the `ampcheck` command).
   Steps not judged run no guard code at all; a judged step adds the flush (the recorder's only host sync, which its
   snapshots every 50 steps make anyway), the file write and this call.

    AMPCHECK_BIN=build/ampcheck python3 python/tools/guard_check.py --parts stop
    AMPCHECK_BIN=build/ampcheck python3 python/tools/guard_check.py --parts seeds cost --seeds-loop mlp --seeds 20
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

import guard_util  # noqa: E402
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
    ap.add_argument("--parts", nargs="+", default=["stop", "seeds", "cost"], choices=("stop", "seeds", "cost"))
    ap.add_argument("--seeds-loop", default="hf", choices=("hf", "mlp"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    d = tempfile.mkdtemp()
    t0 = time.time()
    print(
        f"Command: `python3 python/tools/guard_check.py {' '.join(sys.argv[1:])}`; guard: judge_every="
        f"{a.judge_every}, stop_on={STOP_ON}; judge: {default_judge().__name__}; torch {torch.__version__}.\n"
    )
    ref = f"{d}/reference.h5"
    guard = dict(reference=ref, judge_every=a.judge_every, stop_on=STOP_ON)
    if "stop" in a.parts or a.seeds_loop == "hf":
        quiet(hf_util.make_reference, d, hf_util.run, steps=a.reference_steps, probe_every=DEFAULT_PROBE_EVERY)
        print(f"HF reference: FP32 + seed + data-order runs of {a.reference_steps} steps.\n")
    if "stop" in a.parts:
        stop_part(d, guard)
    if "seeds" in a.parts:
        seeds_part(a, d, guard)
    if "cost" in a.parts:
        cost_part(a, d)
    print(f"(total {time.time() - t0:.0f} s)")


def stop_part(d, guard):
    """1. the planted blow-up"""
    cb, _ = quiet(
        hf_util.run,
        d,
        "blow",
        steps=1000,
        fp16=True,
        cpu_scaler=True,
        blow_at=120,
        guard=guard,
        probe_every=DEFAULT_PROBE_EVERY,
    )
    g = cb.recorder.guard
    final = g.final
    r, row = hf_util.judge(d, "blow")
    print("## 1. fp16 blow-up planted at step 120 of 1,000\n")
    print("| stopped after step | judgements (steps: verdict) | file status | `ampcheck judge` on the file |")
    print("| --- | --- | --- | --- |")
    print(
        f"| {final.steps if final else 'not stopped'} | "
        f"{', '.join(f'{j.steps}: {j.verdict}' for j in g.judgements)} | "
        f"{'interrupted' if final else 'completed'} | {row['verdict']} |\n"
    )
    print(f"Message: {final.message if final else '-'}\n")


def seeds_part(a, d, guard):
    """2. correct runs"""
    if a.seeds_loop == "mlp":
        print(
            f"Plain loop (tests/guard_util.py's MLP), per seed s: its own reference (FP32 run with seed s, data seed "
            f"s; a seed and a data-order noise run), then the fp16 autocast + GradScaler run of the same training "
            f"with the guard; {a.steps} steps.\n"
        )
    rows, stopped, not_tracks, judgements = [], 0, 0, 0
    for i in range(a.seeds):
        if a.seeds_loop == "hf":
            strategy = dict(fp16=True, cpu_scaler=True) if i % 2 == 0 else dict(bf16=True)
            cb, _ = quiet(
                hf_util.run,
                d,
                f"ok{i}",
                steps=a.steps,
                seed=2000 + i,
                data_seed=3000 + i,
                guard=guard,
                probe_every=DEFAULT_PROBE_EVERY,
                **strategy,
            )
            g = cb.recorder.guard
            name = "fp16 + GradScaler" if i % 2 == 0 else "bf16"
        else:
            ref = guard_util.make_reference(d, a.steps, seed=2000 + i, data_seed=3000 + i, name=f"ref{i}")
            g = guard_util.train(
                f"{d}/ok{i}.h5", a.steps, seed=2000 + i, data_seed=3000 + i, fp16=True, **dict(guard, reference=ref)
            ).guard
            name = "fp16 + GradScaler"
        judgements += len(g.judgements)
        bad = [j for j in g.judgements if j.verdict != "tracks"]
        not_tracks += len(bad)
        stopped += g.stopped is not None
        rows.append(
            f"| {2000 + i} | {name} | {len(g.judgements)} | "
            f"{'; '.join(f'{j.steps}: {j.verdict}' for j in bad) or 'all tracks'} | "
            f"{'STOPPED' if g.stopped else 'no'} |"
        )
    print(f"## 2. {a.seeds} correct runs ({a.seeds_loop}, {a.steps} steps each)\n")
    print(f"Stopped: {stopped} of {a.seeds}; judgements other than tracks: {not_tracks} of {judgements}.\n")
    print("| seed | strategy | judgements | not tracks | stopped |\n| --- | --- | --- | --- | --- |")
    print("\n".join(rows) + "\n")


def cost_part(a, d):
    """3. cost: the judge's time per call on the last partial file judged"""
    runs = sorted(f for f in os.listdir(d) if f.startswith("ok") and f.endswith(".h5"))
    ref = f"{d}/reference.h5" if os.path.exists(f"{d}/reference.h5") else f"{d}/ref0.h5"
    judge = default_judge()
    times = []
    for _ in range(10):
        t = time.perf_counter()
        judge(f"{d}/{runs[0]}", ref)
        times.append((time.perf_counter() - t) * 1e3)
    per_call = statistics.median(times)
    print("## 3. Cost\n")
    print(
        f"One judgement ({judge.__name__}, {runs[0]}): median {per_call:.1f} ms wall over 10 calls (min "
        f"{min(times):.1f}, max {max(times):.1f}). At judge_every=50 that is {per_call / 50:.2f} ms per step on "
        f"average, whatever the model; the steps not judged run no guard code (no sync, no work).\n"
    )


if __name__ == "__main__":
    main()
