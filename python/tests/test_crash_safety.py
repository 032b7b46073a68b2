"""Crash-safe recording: a recorded loop killed with SIGKILL leaves a whole file up to its last snapshot (status
running); SIGTERM leaves every step recorded (status interrupted); a loop that never calls close() is completed with a
note; `ampcheck judge` judges the partial runs as such. A signal is sent after a random number of recorded steps (the
loop reports each) plus a random fraction of a step, so it lands anywhere in a step — a snapshot's write included —
whatever the machine's speed, and no test waits longer than the steps it needs. The loops killed are forks of one
process that imported torch and ampcheck (crash_loop.py --zygote), each running the script's loop as the script does:
a kill costs a fork, not an interpreter start (seconds each)."""

import itertools
import os
import random
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import crash_loop

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_SLEEP = 0.01  # crash_loop.py's sleep per step (its default)


class Zygote:
    """`crash_loop.py --zygote`: torch and ampcheck imported once; each loop a test kills is a fork of it."""

    def __init__(self):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "crash_loop.py"), "--zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, CRASH_LOOP_PROGRESS="1"),
        )
        assert self.p.stdout.readline().strip() == "zygote ready"
        self.fifos = itertools.count()
        self.running = None

    def close(self):
        if self.running is not None:  # a test that failed before its loop ended
            os.kill(self.running, signal.SIGKILL)
        self.p.stdin.close()
        self.p.wait(timeout=60)


class Loop:
    """A forked loop: its stdout (the "ready" and progress lines), send_signal and wait (its exit code) as Popen's."""

    def __init__(self, zygote, path, steps, snapshot, fifo):
        os.mkfifo(fifo)
        zygote.p.stdin.write(f"{path} {steps} {snapshot} {fifo}\n")
        zygote.p.stdin.flush()
        self.pid = int(zygote.p.stdout.readline())
        zygote.running = self.pid
        self.zygote = zygote
        self.stdout = open(fifo)

    def send_signal(self, sig):
        os.kill(self.pid, sig)

    def wait(self):
        rc = int(self.zygote.p.stdout.readline())
        self.zygote.running = None
        self.stdout.close()
        return rc


@pytest.fixture(scope="module")
def zygote():
    z = Zygote()
    yield z
    z.close()


def start(zygote, path, steps=400, snapshot=5):
    p = Loop(zygote, path, steps, snapshot, f"{path}.fifo{next(zygote.fifos)}")
    assert p.stdout.readline().strip() == "ready"
    return p


def kill_after(p, steps, sig, rng):
    """Sends sig once the loop has recorded `steps` steps, then a random fraction of a step later."""
    for line in p.stdout:
        if int(line) >= steps:
            break
    time.sleep(rng.uniform(0, STEP_SLEEP))
    p.send_signal(sig)
    return p.wait()


def check_file(path, snapshot):
    with h5py.File(path) as f:  # readable: the file is only ever replaced whole
        status = f.attrs["status"]
        loss = f["steps/loss"][:]
        assert np.isfinite(loss).all()
        for c in f["steps"]:
            assert len(f["steps"][c]) == len(loss)
    return status, len(loss)


def test_sigkill_leaves_whole_files_up_to_the_last_snapshot(tmp_path, zygote):
    rng = random.Random(1)
    for i in range(4):
        path = str(tmp_path / f"k{i}.h5")
        kill_after(start(zygote, path), rng.randint(6, 60), signal.SIGKILL, rng)  # past the first snapshot (step 5)
        status, n = check_file(path, 5)
        assert status == "running" and n % 5 == 0 and n > 0, (status, n)


def test_sigterm_records_every_step_as_interrupted(tmp_path, zygote):
    path = str(tmp_path / "t.h5")
    rc = kill_after(start(zygote, path), 12, signal.SIGTERM, random.Random(2))
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


def test_judge_judges_a_killed_run_as_partial(tmp_path, zygote):
    binary = os.environ.get("AMPCHECK_BIN")
    if not binary:
        pytest.skip("AMPCHECK_BIN not set (CTest sets it)")
    d = str(tmp_path)
    for name, seed in (("fp32", 0), ("seed", 1)):  # complete runs: the same loop, in this process, no sleep
        crash_loop.train(f"{d}/{name}.h5", 100, 10, seed=seed, sleep=0)
    assert (
        subprocess.run(
            [binary, "reference", f"{d}/fp32.h5", "--spread", f"seed:{d}/seed.h5", "--out", f"{d}/ref.h5"],
            stdout=subprocess.DEVNULL,
        ).returncode
        == 0
    )
    kill_after(start(zygote, f"{d}/killed.h5", steps=100, snapshot=10), 45, signal.SIGKILL, random.Random(3))
    r = subprocess.run(
        [binary, "judge", f"{d}/killed.h5", "--reference", f"{d}/ref.h5", "--out", f"{d}/j"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert "partial run" in r.stdout and "of the 100 steps" in r.stdout, r.stdout


def test_sigint_is_interrupted_with_every_recorded_step(tmp_path, zygote):
    path = str(tmp_path / "i.h5")
    # no snapshot: what the file holds comes from the KeyboardInterrupt
    kill_after(start(zygote, path, snapshot=1000), 12, signal.SIGINT, random.Random(4))
    with h5py.File(path) as f:
        assert f.attrs["status"] == "interrupted" and "SIGINT" in f.attrs["note"]
        assert len(f["steps/loss"]) > 0


def test_an_object_that_is_no_optimizer_is_named(tmp_path):
    import warnings

    import torch

    from ampcheck import Recorder

    m = torch.nn.Linear(2, 1)

    class Opaque:  # a wrapper that hides its optimizer
        pass

    with pytest.warns(UserWarning, match="cannot see its steps"):
        r = Recorder(str(tmp_path / "o.h5"), m, Opaque())
    warnings.simplefilter("ignore")
    r.close()
