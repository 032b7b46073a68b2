"""Distributed-safe recording: 2 Gloo ranks on the CPU (RANK / WORLD_SIZE / MASTER_ADDR set, as torchrun does) train
hf_util's tiny GPT-2 with the real HF Trainer and AmpcheckCallback (tests/ddp_worker.py): by default rank 0 alone
records (one file), with per_rank=True each rank its own (two files, named by rank); every file is judged by
`ampcheck judge` against a reference built from rank 0's files. The grads read at the end of backward are DDP's
all-reduced ones: both ranks record the same grad_norm (to float64 rounding: the same reduced grads, 1e-12 relative)
while their losses (their own data shards) differ."""

import os
import socket
import subprocess
import sys

import h5py
import numpy as np

import hf_util

STEPS = 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_record_one_file_by_default_and_one_per_rank_when_asked(tmp_path):
    out = str(tmp_path)
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_worker.py")
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, worker, out, str(STEPS)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank}:\n{log[-3000:]}"
    files = sorted(f for f in os.listdir(out) if f.endswith(".h5"))
    assert files == ["default.h5", "per-rank.rank0.h5", "per-rank.rank1.h5", "seed.rank0.h5", "seed.rank1.h5"], files
    steps = {}
    for name in ("default", "per-rank.rank0", "per-rank.rank1"):
        with h5py.File(f"{out}/{name}.h5") as f:
            assert f.attrs["status"] == "completed", name
            steps[name] = {k: f["steps"][k][:] for k in ("loss", "grad_norm")}
            assert len(steps[name]["loss"]) == STEPS, name
    r0, r1 = steps["per-rank.rank0"], steps["per-rank.rank1"]
    np.testing.assert_allclose(r0["grad_norm"], r1["grad_norm"], rtol=1e-12)  # the all-reduced grads on both ranks
    assert not np.allclose(r0["loss"], r1["loss"]), "the ranks' losses (their own batches) should differ"
    np.testing.assert_array_equal(steps["default"]["loss"], r0["loss"])  # the default file is rank 0's
    r = hf_util.ampcheck(
        "reference", f"{out}/per-rank.rank0.h5", "--spread", f"seed:{out}/seed.rank0.h5", "--out", f"{out}/reference.h5"
    )
    assert r.returncode == 0, r.stdout
    for name in ("default", "per-rank.rank0", "per-rank.rank1"):
        r = hf_util.ampcheck(
            "judge", f"{out}/{name}.h5", "--reference", f"{out}/reference.h5", "--out", f"{out}/j-{name}"
        )
        assert r.returncode == 0 and "1 passed, 0 failed" in r.stdout, f"{name}:\n{r.stdout}"
