"""One rank of the distributed test (test_distributed.py): the HF Trainer on hf_util's tiny GPT-2, CPU, Gloo (launched
with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, as torchrun does), recorded by AmpcheckCallback three times:
by default (rank 0 records OUT/default.h5), per_rank=True (OUT/per-rank.rank<R>.h5), and per_rank=True with another
seed (OUT/seed.rank<R>.h5: a noise run for the reference). Usage: ddp_worker.py OUT STEPS"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

import hf_util  # noqa: E402
from ampcheck.integrations.hf import AmpcheckCallback  # noqa: E402


def run(out, name, steps, seed=1337, **kw):
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer-" + name),
        max_steps=steps,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        lr_scheduler_type="constant",
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        data_seed=11,
        dataloader_num_workers=0,
        disable_tqdm=True,
        ddp_backend="gloo",
    )
    cb = AmpcheckCallback(
        os.path.join(out, name + ".h5"), attributes={"run_key": "hf-tiny-gpt2-ddp"}, overwrite=True, probe_every=1, **kw
    )
    trainer = Trainer(model=hf_util.model(seed), args=args, train_dataset=hf_util.Markov(), callbacks=[cb])
    cb.train(trainer)
    return cb


def main():
    out, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    run(out, "default", steps)
    run(out, "per-rank", steps, per_rank=True)
    cb = run(out, "seed", steps, seed=1338, per_rank=True)
    assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == 2, "not distributed"
    print(f"rank {torch.distributed.get_rank()}: recorded {cb.recorder.path}", flush=True)
    # The Trainer initialised the Gloo process group and never destroys it; PyTorch asks every rank to, and a rank that
    # exits without it can abort in Gloo's teardown ("terminate called without an active exception", seen once in CI).
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
