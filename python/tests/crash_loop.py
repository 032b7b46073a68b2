"""A recorded loop to be killed (test_crash_safety.py, python/tools/crash_safety.py): a small MLP, one Recorder step per
optimizer step, a snapshot every SNAPSHOT steps, STEPS steps, a short sleep per step so kills land mid-run. Run as a
script (crash_loop.py PATH STEPS SNAPSHOT [SEED [SLEEP]]) it prints "ready" before the first step and, with
CRASH_LOOP_PROGRESS set, the number of steps recorded after each step; train() is the same loop in the caller's
process (the complete runs a test builds its reference from).

`crash_loop.py --zygote` imports torch and ampcheck once, then, for each line `PATH STEPS SNAPSHOT FIFO` on its stdin,
forks a child that runs this script's loop as the script would (its stdout — "ready", the progress — into the named
pipe FIFO; an exception it does not catch goes to the interpreter's exception hook and exit handlers, as in a script;
it ends with sys.exit) and prints the child's pid, then, once the child has ended, its exit code (negative: the signal
that ended it). Each loop killed by a test then costs a fork, not an interpreter importing torch (seconds)."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
import torch  # noqa: E402

from ampcheck import Recorder  # noqa: E402


def train(path, steps, snapshot, seed=0, sleep=0.01, progress=False):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rec = Recorder(
        path,
        model,
        opt,
        snapshot_every=snapshot,
        flush_every=snapshot,
        overwrite=True,
        attributes={"run_key": "crash-loop", "steps": steps},
        perturbation="seed" if seed else None,
    )
    if progress:
        print("ready", flush=True)
    for step in range(steps):
        x = torch.randn(16, 32)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        rec.step(loss)
        if progress and os.environ.get("CRASH_LOOP_PROGRESS"):
            print(step + 1, flush=True)  # steps recorded so far (the measurement reads the last line)
        time.sleep(sleep)
    rec.close()


def zygote():
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # a first optimizer imports torch._dynamo (a second)
    print("zygote ready", flush=True)
    for line in sys.stdin:
        path, steps, snapshot, fifo = line.split()
        pid = os.fork()
        if pid == 0:  # the loop, as `crash_loop.py PATH STEPS SNAPSHOT` runs it
            fd = os.open(fifo, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
            train(path, int(steps), int(snapshot), progress=True)
            sys.exit(0)
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    zygote()
elif __name__ == "__main__":
    train(
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        seed=int(sys.argv[4]) if len(sys.argv) > 4 else 0,
        sleep=float(sys.argv[5]) if len(sys.argv) > 5 else 0.01,
        progress=True,
    )
