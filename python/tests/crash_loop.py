"""A recorded loop to be killed (test_crash_safety.py, python/tools/crash_safety.py): a small MLP, one Recorder step per
optimizer step, a snapshot every SNAPSHOT steps, STEPS steps, a short sleep per step so kills land mid-run. Run as a
script (crash_loop.py PATH STEPS SNAPSHOT [SEED [SLEEP]]) it prints "ready" before the first step and, with
CRASH_LOOP_PROGRESS set, the number of steps recorded after each step; train() is the same loop in the caller's
process (the complete runs a test builds its reference from)."""

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


if __name__ == "__main__":
    train(
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        seed=int(sys.argv[4]) if len(sys.argv) > 4 else 0,
        sleep=float(sys.argv[5]) if len(sys.argv) > 5 else 0.01,
        progress=True,
    )
