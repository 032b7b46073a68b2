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
import functools
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
    ap.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="part stop's device (cuda: the Trainer's own fp16 autocast + GradScaler)",
    )
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
        run = functools.partial(hf_util.run, device=a.device)
        quiet(hf_util.make_reference, d, run, steps=a.reference_steps, probe_every=DEFAULT_PROBE_EVERY)
        print(f"HF reference ({a.device}): FP32 + seed + data-order runs of {a.reference_steps} steps.\n")
    if "stop" in a.parts:
        stop_part(d, guard, a.device)
    if "seeds" in a.parts:
        seeds_part(a, d, guard)
    if "cost" in a.parts:
        cost_part(a, d)
    print(f"(total {time.time() - t0:.0f} s)")


def stop_part(d, guard, device="cpu"):
    """1. the planted blow-up"""
    cb, _ = quiet(
        hf_util.run,
        d,
        "blow",
        steps=1000,
        fp16=True,
        cpu_scaler=device == "cpu",
        device=device,
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


def timed_guard(fn):
    """Runs fn() with the guard's work timed: Recorder._judge_now (a judged step on the training thread: the flush,
    the file written unless the snapshot just was, the judgement submitted — or made, where on the training thread),
    Guard.poll (every other step: has the background judgement finished?) and Guard._judge_quietly (the judgement
    itself, on whichever thread). Returns (fn's result, judged-step ms list, poll ms list, judgement ms list)."""
    from ampcheck.guard import Guard
    from ampcheck.recorder import Recorder

    judged_step, polls, judgement = [], [], []
    real = Recorder._judge_now, Guard.poll, Guard._judge_quietly

    def timed(real_fn, into):
        def wrapper(self, *args):
            t = time.perf_counter()
            try:
                return real_fn(self, *args)
            finally:
                into.append((time.perf_counter() - t) * 1e3)

        return wrapper

    Recorder._judge_now = timed(real[0], judged_step)
    Guard.poll = timed(real[1], polls)
    Guard._judge_quietly = timed(real[2], judgement)
    try:
        return fn(), judged_step, polls, judgement
    finally:
        Recorder._judge_now, Guard.poll, Guard._judge_quietly = real


def median_step_ms(path):
    import h5py

    with h5py.File(path) as f:
        return statistics.median(float(t) for t in f["steps/step_time_ms"][1:])  # (step 0: the first forward's setup)


def cost_part(a, d):
    """3. cost: the guard's work on the training thread (judged steps, and every other step's check for a finished
    background judgement) and the judgement itself, timed inside real guarded runs (judge_every=50, nothing stopped:
    every judged snapshot a partial run of 50, 100, ... steps against the reference), against the loop's own median
    step time; the judgement in the background (the default) and, for the plain loop, on the training thread"""
    every, steps = 50, a.cost_steps
    judge = default_judge()
    rows = []
    hf_ref = f"{d}/reference.h5"
    if not os.path.exists(hf_ref):
        quiet(hf_util.make_reference, d, hf_util.run, steps=steps, probe_every=DEFAULT_PROBE_EVERY)
    guard = dict(reference=hf_ref, judge_every=every, stop_on=())
    hf = timed_guard(
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
    rows.append(("HF Trainer, tiny GPT-2 (tests/hf_util.py), fp16 + CPU GradScaler", "background", "cost-hf", hf))
    mlp_ref = guard_util.make_reference(d, steps, seed=4000, data_seed=5000, name="cost-ref")
    for background in (True, False):
        name = "cost-mlp" if background else "cost-mlp-sync"
        run = timed_guard(
            lambda name=name, background=background: guard_util.train(
                f"{d}/{name}.h5",
                steps,
                seed=4000,
                data_seed=5000,
                fp16=True,
                reference=mlp_ref,
                judge_every=every,
                judge_in_background=background,
            )
        )
        where = "background" if background else "training thread"
        rows.append(("plain loop, MLP (tests/guard_util.py), fp16 + GradScaler", where, name, run))
    print("## 3. Cost\n")
    print(
        f"Judge: `{judge.__name__}`. Each loop: a guarded run of {steps} steps with judge_every={every}, stop_on=() "
        f"({steps // every} judged steps: partial runs of {every}, {2 * every}, ... steps judged against a reference "
        f"of {steps} steps). Timed inside the run: the judgement itself (Guard._judge_quietly, on the background "
        f"thread or the training thread), a judged step's work on the training thread (Recorder._judge_now: the "
        f"flush, the file written unless the step's snapshot just was, the judgement submitted or made) and every "
        f"other step's check for a finished judgement (Guard.poll). Training-thread cost per step: (all judged steps' "
        f"time + all polls' time) / {steps} steps. Step time: the median step_time_ms of the run's file.\n"
    )
    print(
        "| loop | judgement runs on | median step (ms) | judgement, median (min–max) ms | judged step on the training "
        "thread, median (max) ms | poll, median µs | training-thread cost per step (ms) | share of the step | "
        "judgements / passed over |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, where, file, (rec, judged, polls, judgements) in rows:
        step_ms = median_step_ms(f"{d}/{file}.h5")
        per_step = (sum(judged) + sum(polls)) / steps
        made = len(judgements)
        passed = getattr(getattr(rec, "guard", None), "passed_over", None)
        if passed is None and isinstance(rec, tuple):  # hf_util.run: (callback, how)
            passed = rec[0].recorder.guard.passed_over
        print(
            f"| {name} | {where} | {step_ms:.2f} | {statistics.median(judgements):.1f} ({min(judgements):.1f}–"
            f"{max(judgements):.1f}) | {statistics.median(judged):.3f} ({max(judged):.1f}) | "
            f"{statistics.median(polls) * 1e3 if polls else 0:.1f} | {per_step:.4f} | {per_step / step_ms * 100:.2f}% "
            f"| {made} / {passed} |"
        )
    print()
    # the whole run's wall time, which a background judgement's share of the CPU would show in (the table above times
    # the training thread only): the plain loop unguarded, guarded in the background and on the training thread,
    # interleaved 3 times, median
    walls: dict[str, list[float]] = {"no guard": [], "background": [], "training thread": []}
    for _ in range(3):
        for case in walls:
            kw = {} if case == "no guard" else dict(reference=mlp_ref, judge_every=every)
            if case == "training thread":
                kw["judge_in_background"] = False
            t = time.perf_counter()
            guard_util.train(f"{d}/wall.h5", steps, seed=4000, data_seed=5000, fp16=True, **kw)
            walls[case].append(time.perf_counter() - t)
    base = statistics.median(walls["no guard"])
    print(
        f"Whole-run wall time of the plain loop ({steps} steps, judge_every={every}; median of 3, interleaved): "
        + "; ".join(
            f"{case} {statistics.median(w):.3f} s ({statistics.median(w) / base:.3f}x)" for case, w in walls.items()
        )
        + f". Intra-op threads: {torch.get_num_threads()}; cores: {os.cpu_count()}.\n"
    )


if __name__ == "__main__":
    main()
