"""The live guard (ampcheck/guard.py) on the CPU: a plain loop (guard_util's MLP, fp16 autocast + a CPU GradScaler) and
the real HF Trainer (hf_util's tiny GPT-2) with a planted fp16 blow-up are stopped within judge_every steps of it, the
file written (status interrupted) and judged nonfinite / diverges by `ampcheck judge`; the same runs without the
blow-up are judged at every judged step and never stopped; judged in the background (the default), a finite
divergence stops the loop at the first step after its judgement finished. (The 1,000-step HF run and the 20 seeds:
python/tools/guard_check.py, reports/python/guard.md.)"""

import math

import h5py
import pytest
import torch

import ampcheck
import guard_util
import hf_util
from ampcheck import guard

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
    kw = dict(reference=ref, judge_every=10, stop_on=STOP_ON)
    # on the training thread: every judged step judged, in order
    rec = guard_util.train(f"{d}/ok.h5", 60, fp16=True, seed=3, judge_in_background=False, **kw)
    assert [j.steps for j in rec.guard.judgements] == [10, 20, 30, 40, 50, 60]
    assert all(j.verdict == "tracks" for j in rec.guard.judgements), rec.guard.judgements
    with h5py.File(f"{d}/ok.h5") as f:
        assert f.attrs["status"] == "completed" and len(f["steps/loss"]) == 60
    # in the background (the default): a judged step that comes while the previous judgement runs is passed over;
    # the one in flight at the end is taken in by close
    rec = guard_util.train(f"{d}/ok-bg.h5", 60, fp16=True, seed=3, **kw)
    assert len(rec.guard.judgements) + rec.guard.passed_over == 6 and rec.guard.judgements, rec.guard.judgements
    assert all(j.verdict == "tracks" for j in rec.guard.judgements) and rec.guard.stopped is None
    with h5py.File(f"{d}/ok-bg.h5") as f:
        assert f.attrs["status"] == "completed" and len(f["steps/loss"]) == 60


def test_a_finite_divergence_judged_in_the_background_stops_the_loop(tmp_path):
    """The learning rate x100 at step 30 (the loss stays finite, so the judged steps are judged in the background):
    the judgement of a judged step after 30 says diverges and the loop stops at the first step after it finished."""
    d = str(tmp_path)
    ref = guard_util.make_reference(d, 200)
    with pytest.raises(ampcheck.GuardStop) as stop:
        guard_util.train(f"{d}/div.h5", 200, fp16=True, lr_jump_at=30, reference=ref, judge_every=10, stop_on=STOP_ON)
    stopping, final = stop.value.judgement, stop.value.final
    assert stopping.verdict == "diverges" and 30 < stopping.steps < 200, stopping
    # the stop comes at the first step after the background judgement finished: the file has those steps too
    assert final is not None and final.steps >= stopping.steps, (stopping, final)
    with h5py.File(f"{d}/div.h5") as f:
        assert f.attrs["status"] == "interrupted" and "judged diverges" in f.attrs["note"]
        assert len(f["steps/loss"]) == final.steps
        assert all(math.isfinite(v) for v in f["steps/loss"][:])  # judged in the background: no urgent judgement


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


def test_the_hdf5_libraries_of_a_process_are_read_from_its_maps():
    wheel = "/venv/site-packages/h5py.libs/libhdf5-9e18f0c6.so.320.0.0"
    wheel_hl = "/venv/site-packages/h5py.libs/libhdf5_hl-69da89c9.so.320.0.0"
    debian = "/usr/lib/x86_64-linux-gnu/libhdf5_serial.so.103.3.1"
    debian_hl = "/usr/lib/x86_64-linux-gnu/libhdf5_serial_hl.so.100.1.5"
    maps = "\n".join(
        f"7f00{i:04x}000-7f00{i:04x}fff r-xp 00000000 08:01 {i} {p}"
        for i, p in enumerate([wheel, wheel_hl, debian, debian, debian_hl, "/usr/lib/libz.so.1"])
    )
    assert guard.hdf5_libraries(maps) == {wheel, debian}  # h5py's wheel and the native core's: two, reading is safe
    assert guard.hdf5_libraries(maps.replace(wheel, debian)) == {debian}  # one library shared: not thread-safe
    assert guard.hdf5_libraries("") == set()


def test_a_shared_hdf5_library_moves_the_in_process_judgement_to_the_training_thread(mlp_reference, monkeypatch):
    d, ref = mlp_reference
    monkeypatch.setattr(guard, "hdf5_shared_with_h5py", lambda: True)
    assert guard.Guard(ref, 10, judge=guard.NativeJudge()).background is False
    assert guard.Guard(ref, 10, judge=guard.command_judge).background is True  # a subprocess reads: no shared library
    monkeypatch.setattr(guard, "hdf5_shared_with_h5py", lambda: False)
    assert guard.Guard(ref, 10, judge=guard.NativeJudge()).background is True


# -- issue 51, finding 7: the reference checked before training, a non-finite loss always stops, partial runs judged
#    from the smoothing window on, GuardStop carries the judgement that stopped the run


def test_a_reference_whose_seed_run_is_bit_identical_is_refused_before_training(tmp_path):
    """The sweep's references where the script seeds itself after the recorder (issue 52): the seed run equals the FP32
    run bit for bit, the band rests on nothing, and a correct fp16 run was stopped after its first judged step."""
    d = str(tmp_path)
    guard_util.train(f"{d}/fp32.h5", 30)
    guard_util.train(f"{d}/seed.h5", 30, perturbation="seed")  # "seed" run with the same seed: bit-identical
    r = guard_util.ampcheck("reference", f"{d}/fp32.h5", "--spread", f"{d}/seed.h5", "--out", f"{d}/ref.h5")
    if r.returncode == 0:  # (`ampcheck reference` may already refuse it; the judge and the guard refuse it anyway)
        with pytest.raises(ValueError, match="noise run 'seed' is bit-identical to the FP32 run"):
            guard_util.train(f"{d}/run.h5", 30, fp16=True, reference=f"{d}/ref.h5", stop_on=STOP_ON)
        out = judged(f"{d}/fp32.h5", f"{d}/ref.h5", f"{d}/j")
        assert "bit-identical" in out, out
    else:
        assert "bit-identical" in r.stdout, r.stdout


def test_a_reference_of_another_training_or_not_hdf5_is_refused_before_training(mlp_reference, tmp_path):
    d, ref = mlp_reference
    with pytest.raises(ValueError, match="reference's run_key is 'guard-mlp', this run's is 'other'"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=ref, attributes_extra={"run_key": "other"})
    with pytest.raises(ValueError, match="reference's model_parameters is '\\d+', this run's is '\\d+'"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=ref, hidden=128)
    (tmp_path / "notes.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="is not an HDF5 file"):
        guard_util.train(f"{tmp_path}/x.h5", 1, reference=f"{tmp_path}/notes.h5")
    assert not (tmp_path / "x.h5").exists()  # refused before any step


def test_a_run_past_a_shorter_reference_still_stops_on_its_nonfinite_loss(mlp_reference, tmp_path):
    """The reference has 60 steps, the run 100 with a blow-up at step 75: judged on its first 60 steps (tracks), then
    stopped on the non-finite loss at the first judged step after 75."""
    d, ref = mlp_reference
    with pytest.raises(ampcheck.GuardStop) as stop:
        guard_util.train(
            f"{tmp_path}/long.h5", 100, fp16=True, blow_at=75, reference=ref, judge_every=10, stop_on=STOP_ON
        )
    j = stop.value.judgement
    assert j.verdict == "nonfinite" and 75 < j.steps <= 80, j


def test_a_failing_judge_does_not_keep_a_nonfinite_run_going(mlp_reference, tmp_path):
    d, ref = mlp_reference

    def broken(run, reference):
        raise RuntimeError("the judge is broken")

    with pytest.raises(ampcheck.GuardStop) as stop:
        guard_util.train(
            f"{tmp_path}/b.h5",
            60,
            fp16=True,
            blow_at=30,
            reference=ref,
            judge_every=10,
            stop_on=("nonfinite",),
            judge=broken,
        )
    j = stop.value.judgement
    assert j.verdict == "nonfinite" and 30 < j.steps <= 40 and "the judge is broken" in j.message, j
    assert stop.value.final is None  # the file written at the stop could not be judged either: said, not invented


def test_guardstop_carries_the_judgement_that_stopped_the_run(mlp_reference, tmp_path):
    d, ref = mlp_reference
    verdicts = iter(["diverges"] + ["tracks"] * 10)

    def scripted(run, reference):
        v = next(verdicts)
        return guard.GuardJudgement(verdict=v, passed=v == "tracks", message=f"scripted {v}", steps=0)

    with pytest.raises(ampcheck.GuardStop) as stop:
        guard_util.train(
            f"{tmp_path}/s.h5",
            40,
            reference=ref,
            judge_every=10,
            stop_on=STOP_ON,
            judge=scripted,
            judge_in_background=False,
        )
    assert stop.value.judgement.verdict == "diverges" and stop.value.final.verdict == "tracks"
    assert "diverges" in str(stop.value)


def test_partial_runs_are_judged_from_the_smoothing_window_on(mlp_reference, tmp_path):
    d, ref = mlp_reference
    rec = guard_util.train(f"{tmp_path}/p.h5", 30, fp16=True, reference=ref, judge_every=3, judge_in_background=False)
    assert [j.steps for j in rec.guard.judgements] == [12, 15, 18, 21, 24, 27, 30], rec.guard.judgements
    r = guard_util.ampcheck(
        "judge", f"{tmp_path}/p.h5", "--reference", ref, "--first-steps", "1", "--out", f"{tmp_path}/j1"
    )
    assert r.returncode != 0 and "fewer than the 10 steps a partial run needs" in r.stdout, r.stdout
