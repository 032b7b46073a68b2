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
3. Cost: guarded runs of COST_STEPS steps (the HF Trainer above and tests/guard_util.py's plain loop) with
   judge_every=50 and nothing stopped, timed inside: the judgement alone (in-process where the package has its native
   core, else the `ampcheck` command) and the judged step's whole extra work (the flush, the file written, the
   judgement), against the loop's median step time. Steps not judged run no guard code at all.

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
    ap.add_argument("--cost-steps", type=int, default=400, help="steps of each guarded run the cost is timed in")
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


def timed_judged_steps(fn):
    """Runs fn() with Recorder._judge_now (a judged step's whole extra work: the flush, the file written, the judgement)
    and Guard.judge (the judgement alone) timed; returns (fn's result, judged-step ms list, judgement ms list)."""
    from ampcheck.guard import Guard
    from ampcheck.recorder import Recorder

    judged_step, judgement = [], []
    real_judge_now, real_judge = Recorder._judge_now, Guard.judge

    def judge_now(self):
        t = time.perf_counter()
        try:
            return real_judge_now(self)
        finally:
            judged_step.append((time.perf_counter() - t) * 1e3)

    def guard_judge(self, path):
        t = time.perf_counter()
        try:
            return real_judge(self, path)
        finally:
            judgement.append((time.perf_counter() - t) * 1e3)

    Recorder._judge_now, Guard.judge = judge_now, guard_judge
    try:
        return fn(), judged_step, judgement
    finally:
        Recorder._judge_now, Guard.judge = real_judge_now, real_judge


def median_step_ms(path):
    import h5py

    with h5py.File(path) as f:
        return statistics.median(float(t) for t in f["steps/step_time_ms"][1:])  # (step 0: the first forward's setup)


def cost_part(a, d):
    """3. cost: a judged step's extra time (flush + file write + judgement) and the judgement alone, timed inside real
    guarded runs (judge_every=50, nothing stopped: every judged snapshot a partial run of 50, 100, ... steps against the
    reference), against the loop's own median step time"""
    every, steps = 50, a.cost_steps
    judge = default_judge()
    rows = []
    hf_ref = f"{d}/reference.h5"
    if not os.path.exists(hf_ref):
        quiet(hf_util.make_reference, d, hf_util.run, steps=steps, probe_every=DEFAULT_PROBE_EVERY)
    guard = dict(reference=hf_ref, judge_every=every, stop_on=())
    _, hf_step, hf_judge = timed_judged_steps(
        lambda: quiet(
            hf_util.run,
            d,
            "cost-hf",
            steps=steps,
            fp16=True,
            cpu_scaler=True,
            guard=guard,
            probe_every=DEFAULT_PROBE_EVERY,
        )
    )
    rows.append(
        ("HF Trainer, tiny GPT-2 (tests/hf_util.py), fp16 + CPU GradScaler", f"{d}/cost-hf.h5", hf_step, hf_judge)
    )
    mlp_ref = guard_util.make_reference(d, steps, seed=4000, data_seed=5000, name="cost-ref")
    _, mlp_step, mlp_judge = timed_judged_steps(
        lambda: guard_util.train(
            f"{d}/cost-mlp.h5", steps, seed=4000, data_seed=5000, fp16=True, reference=mlp_ref, judge_every=every
        )
    )
    rows.append(("plain loop, MLP (tests/guard_util.py), fp16 + GradScaler", f"{d}/cost-mlp.h5", mlp_step, mlp_judge))
    print("## 3. Cost\n")
    print(
        f"Judge: `{judge.__name__}`. Each loop: a guarded run of {steps} steps with judge_every={every}, stop_on=() "
        f"({steps // every} judged steps: partial runs of {every}, {2 * every}, ... steps judged against a reference "
        f"of {steps} steps); timed inside the run: the judgement alone (Guard.judge) and the judged step's whole extra "
        f"work (Recorder._judge_now: the flush, the file written atomically, the judgement). Per step at "
        f"judge_every={every}: the judged step's median / {every}; the steps not judged run no guard code (no sync, no "
        f"work). Step time: the median step_time_ms of the run's file.\n"
    )
    print(
        f"| loop | median step (ms) | judgement, median (min–max) ms | judged step, median (min–max) ms | "
        f"per step at judge_every={every} (ms) | share of the step |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, path, judged, judgements in rows:
        step_ms, per_step = median_step_ms(path), statistics.median(judged) / every
        print(
            f"| {name} | {step_ms:.2f} | {statistics.median(judgements):.1f} ({min(judgements):.1f}–"
            f"{max(judgements):.1f}) | {statistics.median(judged):.1f} ({min(judged):.1f}–{max(judged):.1f}) | "
            f"{per_step:.3f} | {per_step / step_ms * 100:.1f}% |"
        )
    print()


if __name__ == "__main__":
    main()
