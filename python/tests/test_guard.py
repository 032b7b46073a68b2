"""The live guard (ampcheck/guard.py) on the CPU: a plain loop (guard_util's MLP, fp16 autocast + a CPU GradScaler) and
the real HF Trainer (hf_util's tiny GPT-2) with a planted fp16 blow-up are stopped within judge_every steps of it, the
file written (status interrupted) and judged nonfinite / diverges by `ampcheck judge`; the same runs without the
blow-up are judged at every judged step and never stopped. (The 1,000-step HF run and the 20 seeds:
python/tools/guard_check.py, reports/python/guard.md.)"""

import h5py
import pytest
import torch

import ampcheck
import guard_util
import hf_util

STOP_ON = ("nonfinite", "diverges")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Every run of this module on one intra-op thread, as python/tools/guard_check.py and the DDP workers: the tiny
    models' steps are dominated by thread hand-offs otherwise (the HF step ~200 ms with 2 threads on a busy 2-core
    machine, ~15 ms with one). The reference and the runs judged against it are made in this same setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def mlp_reference(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("guard-mlp"))
    return d, guard_util.make_reference(d, 60)


def judged(run, reference, out):
    r = guard_util.ampcheck("judge", run, "--reference", reference, "--out", out)
    return r.stdout


def test_a_plain_loop_blowing_up_at_step_30_is_stopped_by_step_40(mlp_reference):
    d, ref = mlp_reference
    with pytest.raises(ampcheck.GuardStop) as stop:
        guard_util.train(f"{d}/blow.h5", 60, fp16=True, blow_at=30, reference=ref, judge_every=10, stop_on=STOP_ON)
    j = stop.value.judgement
    assert j.verdict in STOP_ON and 30 < j.steps <= 40, j
    with h5py.File(f"{d}/blow.h5") as f:
        assert f.attrs["status"] == "interrupted" and "stopped by the live guard" in f.attrs["note"]
        assert len(f["steps/loss"]) == j.steps
    out = judged(f"{d}/blow.h5", ref, f"{d}/j-blow")
    assert "nonfinite" in out or "diverges" in out, out


def test_a_correct_plain_loop_is_judged_and_never_stopped(mlp_reference):
    d, ref = mlp_reference
    rec = guard_util.train(f"{d}/ok.h5", 60, fp16=True, seed=3, reference=ref, judge_every=10, stop_on=STOP_ON)
    assert [j.steps for j in rec.guard.judgements] == [10, 20, 30, 40, 50, 60]
    assert all(j.verdict == "tracks" for j in rec.guard.judgements), rec.guard.judgements
    with h5py.File(f"{d}/ok.h5") as f:
        assert f.attrs["status"] == "completed" and len(f["steps/loss"]) == 60


def test_bad_guard_arguments_are_refused_before_training(mlp_reference, tmp_path):
    d, ref = mlp_reference
    with pytest.raises(ValueError, match="stop_on=.*'explodes' is not a failing verdict"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=ref, stop_on=("explodes",))
    with pytest.raises(ValueError, match="judge_every=0"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=ref, judge_every=0)
    with pytest.raises(FileNotFoundError, match="missing.h5: the reference file"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=f"{tmp_path}/missing.h5")


def test_the_hf_trainer_blowing_up_at_step_8_stops_by_step_12(tmp_path):
    d = str(tmp_path)
    hf_util.run(d, "fp32", steps=24)
    hf_util.run(d, "fp32-seed", steps=24, seed=1338, perturbation="seed")
    r = guard_util.ampcheck("reference", f"{d}/fp32.h5", "--spread", f"{d}/fp32-seed.h5", "--out", f"{d}/ref.h5")
    assert r.returncode == 0, r.stdout
    guard = dict(reference=f"{d}/ref.h5", judge_every=4, stop_on=STOP_ON)
    cb, how = hf_util.run(d, "blow", steps=24, fp16=True, cpu_scaler=True, blow_at=8, guard=guard)
    assert how == "completed"  # the Trainer stopped cleanly (control.should_training_stop)
    j = cb.recorder.guard.final
    assert j is not None and j.verdict in STOP_ON and 8 < j.steps <= 12, cb.recorder.guard.judgements
    with h5py.File(f"{d}/blow.h5") as f:
        assert f.attrs["status"] == "interrupted" and len(f["steps/loss"]) == j.steps
    out = judged(f"{d}/blow.h5", f"{d}/ref.h5", f"{d}/j-blow")
    assert "nonfinite" in out or "diverges" in out, out
