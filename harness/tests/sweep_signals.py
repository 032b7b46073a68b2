#!/usr/bin/env python3
"""A sweep's command ends with the sweep (issue 51): `ampcheck sweep` whose command is a wrapper (`sh -c 'python
train.py; echo after'`: the training is a grandchild, in the command's process group) is sent SIGINT (Ctrl-C),
SIGTERM or SIGKILL while its first FP32 run trains. Within 15 s no process it started may remain (the training used to
be re-parented to init and go on writing into the sweep directory), and the run's recording must say `interrupted`
(the signal forwarded to the command's group: the recorder's KeyboardInterrupt / SIGTERM path; for SIGKILL of the
sweep, its keeper sends the group SIGTERM). SIGINT and SIGTERM end the sweep by the same signal. While the first
sweep trains, a second sweep into the same --out is refused (exit 2) naming the first's pid.

The processes are found by an environment marker (AMPCHECK_KILL_TEST_TAG, inherited by every descendant), read from
/proc/<pid>/environ; any left at the end are killed.

    python3 harness/tests/sweep_signals.py --ampcheck build/ampcheck
"""
import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

TRAIN = f"""
# a slow plain loop recorded with ampcheck's Recorder: a step every 50 ms, its number printed
import sys, time
sys.path.insert(0, {os.path.join(SRC, "python", "src")!r})
import torch
from ampcheck import Recorder
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 8); y = x.sum(1, keepdim=True)
with Recorder("unused.h5", model, opt) as rec:
    for step in range(100000):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(); rec.step(loss)
        print("step", step, flush=True)
        time.sleep(0.05)
"""


def tagged(tag):
    """Running pids (not zombies, not this process) whose environment carries AMPCHECK_KILL_TEST_TAG=tag."""
    needle = f"AMPCHECK_KILL_TEST_TAG={tag}".encode() + b"\0"
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read():
                    with open(f"/proc/{d}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            out.append(int(d))
        except OSError:
            pass
    return out


def wait_for(what, predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def status_of(path):
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("status")
    except OSError:
        return None


def one(amp, python, work, sig, check_lock):
    """One sweep stopped by `sig` during its first FP32 run; returns a line for the table."""
    name = signal.Signals(sig).name
    tag = f"{name}-{uuid.uuid4().hex[:8]}"
    out = os.path.join(work, f"s-{name}")
    argv = [amp, "sweep", "--out", out, "--steps", "100000", "--strategies", "bf16-autocast", "--",
            "sh", "-c", '"$0" "$@"; echo "the wrapper went on"', python, os.path.join(work, "train.py")]
    env = dict(os.environ, AMPCHECK_KILL_TEST_TAG=tag, OMP_NUM_THREADS="1")
    log = open(os.path.join(work, f"{name}.log"), "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def training():
            logs = glob.glob(os.path.join(out, "logs", "*", "fp32.log"))
            return logs and b"step 3\n" in open(logs[0], "rb").read()
        wait_for("the FP32 run's third step", training, 90)
        if check_lock:
            second = subprocess.run(argv[:3] + [out + "/"] + argv[4:], capture_output=True, text=True, timeout=60,
                                    env=dict(env, AMPCHECK_KILL_TEST_TAG=tag + "-second"))
            text = second.stdout + second.stderr
            assert second.returncode == 2 and f"another sweep (pid {proc.pid}" in text, (second.returncode, text)
            print(f"ok: a second sweep into {out}/ while it trains: exit 2, naming pid {proc.pid}")
        alive = len(tagged(tag))
        os.kill(proc.pid, sig)
        rc = proc.wait(timeout=40)
        if sig != signal.SIGKILL:
            assert rc == -sig, f"{name}: the sweep ended with {rc}, not by {name}"
        wait_for(f"every process below the sweep to end after {name}", lambda: not tagged(tag), 15)
        recording = glob.glob(os.path.join(out, "runs", "*", "fp32.h5"))
        assert recording, f"{name}: no recording"
        wait_for(f"the recording's status 'interrupted' after {name}",
                 lambda: status_of(recording[0]) == "interrupted", 15)
        return f"| {name} | {alive} | 0 | {status_of(recording[0])} | {rc} |"
    finally:
        for pid in tagged(tag) + tagged(tag + "-second"):  # (an older ampcheck leaves them: not left running here)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write(TRAIN)
        rows = []
        failed = 0
        for i, sig in enumerate([signal.SIGINT, signal.SIGTERM, signal.SIGKILL]):
            try:
                rows.append(one(os.path.abspath(args.ampcheck), args.python, work, sig, check_lock=i == 0))
            except AssertionError as e:
                failed += 1
                print(f"FAIL: {e}")
                log = os.path.join(work, f"{signal.Signals(sig).name}.log")
                print(open(log, errors="replace").read()[-2000:])
        print("| signal to the sweep | its processes at the signal | left 15 s later | recording | sweep's exit |")
        print("| --- | --- | --- | --- | --- |")
        print("\n".join(rows))
    if failed:
        print(f"sweep_signals: {failed} of 3 failed")
        return 1
    print(f"sweep_signals: all checks passed ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
