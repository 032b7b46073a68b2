"""Crash-safe recording: a recorded loop killed with SIGKILL leaves a whole file up to its last snapshot (status
running); SIGTERM leaves every step recorded (status interrupted); a loop that never calls close() is completed with a
note; `ampcheck judge` judges the partial runs as such."""

import os
import random
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def start(path, steps=400, snapshot=5):
    p = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "crash_loop.py"), path, str(steps), str(snapshot)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def check_file(path, snapshot):
    with h5py.File(path) as f:  # readable: the file is only ever replaced whole
        status = f.attrs["status"]
        loss = f["steps/loss"][:]
        assert np.isfinite(loss).all()
        for c in f["steps"]:
            assert len(f["steps"][c]) == len(loss)
    return status, len(loss)


def test_sigkill_leaves_whole_files_up_to_the_last_snapshot(tmp_path):
    rng = random.Random(1)
    for i in range(4):
        path = str(tmp_path / f"k{i}.h5")
        p = start(path)
        time.sleep(rng.uniform(0.3, 1.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        status, n = check_file(path, 5)
        assert status == "running" and n % 5 == 0 and n > 0, (status, n)


def test_sigterm_records_every_step_as_interrupted(tmp_path):
    path = str(tmp_path / "t.h5")
    p = start(path)
    time.sleep(0.8)
    p.send_signal(signal.SIGTERM)
    rc = p.wait()
    assert rc == -signal.SIGTERM  # the default handler still ends the process with the signal
    with h5py.File(path) as f:
        assert f.attrs["status"] == "interrupted"
        assert "SIGTERM" in f.attrs["note"]
        assert len(f["steps/loss"]) > 0


def test_no_close_is_completed_with_a_note(tmp_path):
    path = str(tmp_path / "n.h5")
    code = (
        f"import sys; sys.path.insert(0, {os.path.join(os.path.dirname(HERE), 'src')!r}); import torch; from ampcheck import Recorder\n"
        f"m = torch.nn.Linear(4, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        f"r = Recorder({path!r}, m, o)\n"
        f"for _ in range(3):\n"
        f"    l = m(torch.randn(2, 4)).pow(2).mean(); l.backward(); o.step(); o.zero_grad(); r.step(l)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    with h5py.File(path) as f:
        assert f.attrs["status"] == "completed" and len(f["steps/loss"]) == 3
        assert "close() was not called" in f.attrs["note"]


def test_judge_judges_a_killed_run_as_partial(tmp_path):
    binary = os.environ.get("AMPCHECK_BIN")
    if not binary:
        import pytest

        pytest.skip("AMPCHECK_BIN not set (CTest sets it)")
    d = str(tmp_path)
    for name, seed in (("fp32", "0"), ("seed", "1")):
        assert (
            subprocess.run(
                [sys.executable, os.path.join(HERE, "crash_loop.py"), f"{d}/{name}.h5", "100", "10", seed, "0"],
                stdout=subprocess.DEVNULL,
            ).returncode
            == 0
        )
    assert (
        subprocess.run(
            [binary, "reference", f"{d}/fp32.h5", "--spread", f"seed:{d}/seed.h5", "--out", f"{d}/ref.h5"],
            stdout=subprocess.DEVNULL,
        ).returncode
        == 0
    )
    p = start(f"{d}/killed.h5", steps=100, snapshot=10)
    time.sleep(0.6)
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = subprocess.run(
        [binary, "judge", f"{d}/killed.h5", "--reference", f"{d}/ref.h5", "--out", f"{d}/j"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert "partial run" in r.stdout and "of the 100 steps" in r.stdout, r.stdout


def test_sigint_is_interrupted_with_every_recorded_step(tmp_path):
    path = str(tmp_path / "i.h5")
    p = start(path, snapshot=1000)  # no snapshot: what the file holds comes from the KeyboardInterrupt
    time.sleep(0.8)
    p.send_signal(signal.SIGINT)
    p.wait()
    with h5py.File(path) as f:
        assert f.attrs["status"] == "interrupted" and "SIGINT" in f.attrs["note"]
        assert len(f["steps/loss"]) > 0


def test_an_object_that_is_no_optimizer_is_named(tmp_path):
    import warnings

    import pytest
    import torch

    from ampcheck import Recorder

    m = torch.nn.Linear(2, 1)

    class Opaque:  # a wrapper that hides its optimizer
        pass

    with pytest.warns(UserWarning, match="cannot see its steps"):
        r = Recorder(str(tmp_path / "o.h5"), m, Opaque())
    warnings.simplefilter("ignore")
    r.close()
