#!/usr/bin/env python3
"""A training script with one planted precision fault, for `ampcheck sweep --localize` (issue 52: the localization
campaign, scenarios/localize/campaign.py, and CTest cpu.localize_family).

    python3 scenarios/localize/plant_train.py --family qwen2 --plant weight:model.layers.1.self_attn.q_proj --steps 30
    ampcheck sweep --steps 30 --localize --strategies fp16-autocast-scaler -- python3 plant_train.py ...

A tiny transformers model of one family built from its config (nothing downloaded), trained on a synthetic Markov
language with AdamW by a plain loop (the Recorder), the HF Trainer (ampcheck's callback) or Lightning (ampcheck's
callback). --plant KIND:MODULE plants one fault in every run (FP32 included):

  weight     the module's weights x FACTOR (a weight outlier: its outputs overflow fp16 where it computes in fp16)
  spike      a forward hook multiplies the module's floating output by FACTOR (an activation spike)
  noupcast   the module (a norm) computes its statistics in the autocast dtype on inputs x FACTOR (no upcast)
  lowloss    the head's output turned into log-probabilities (x FACTOR) without the upcast: exp in fp16 overflows
  lostupdate the module's weights x FACTOR, rounded to bf16 after each low-precision forward (lost updates)

The fault is planted in the FP32 runs too: in FP32 it is harmless (activations of 1e5 are fine), under fp16 it is not.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "src"))

VOCAB, SEQ, BATCH = 64, 16, 8
FAMILIES = ("gpt2", "llama", "bert", "t5", "qwen2", "opt", "gpt_neox", "mistral", "phi")


class MarkovText(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int = 1024, seed: int = 7) -> None:
        g = torch.Generator().manual_seed(seed)
        succ = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
        toks = [1]
        for _ in range(n + SEQ):
            toks.append(int(succ[toks[-1], torch.randint(0, 4, (1,), generator=g)]))
        self.tokens, self.n = torch.tensor(toks), n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.tokens[i : i + SEQ]
        return {"input_ids": x, "labels": x.clone()}


def build(family: str) -> torch.nn.Module:
    """A tiny model (2 layers, width 32) of the family, from a config."""
    import transformers as tf

    common = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(
            tf.GPT2Config(n_positions=SEQ, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                          attn_pdrop=0.0, **common)
        )
    if family == "bert":
        return tf.BertForMaskedLM(
            tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, pad_token_id=0)
        )
    if family == "t5":
        return tf.T5ForConditionalGeneration(
            tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                        num_heads=2, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        )
    if family == "opt":
        return tf.OPTForCausalLM(
            tf.OPTConfig(hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                         max_position_embeddings=SEQ, word_embed_proj_dim=32, dropout=0.0, attention_dropout=0.0,
                         **common)
        )
    if family == "gpt_neox":
        return tf.GPTNeoXForCausalLM(
            tf.GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=SEQ, hidden_dropout=0.0, attention_dropout=0.0, **common)
        )
    if family == "phi":
        return tf.PhiForCausalLM(
            tf.PhiConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=SEQ, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                         **common)
        )
    cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
           "mistral": (tf.MistralConfig, tf.MistralForCausalLM)}.get(family)
    if cls is None:
        raise SystemExit(f"--family {family!r}: expected one of {', '.join(FAMILIES)}")
    cfg = cls[0](hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, max_position_embeddings=SEQ, **common)
    return cls[1](cfg)


def _low(x: torch.Tensor) -> bool:
    """Inside a region that computes in low precision (autocast on: the module is not kept in FP32)."""
    return torch.is_autocast_enabled(x.device.type)


def plant(model: torch.nn.Module, spec: str, factor: float) -> None:
    kind, _, name = spec.partition(":")
    module = model.get_submodule(name)
    if kind == "weight":
        with torch.no_grad():
            for p in module.parameters(recurse=False):
                p.mul_(factor)
    elif kind == "spike":

        def spike(_m: torch.nn.Module, _a: object, out: object) -> object:
            if isinstance(out, torch.Tensor):
                return out * factor
            if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
                return (out[0] * factor, *out[1:])
            return out

        module.register_forward_hook(spike)
    elif kind == "noupcast":
        # a norm that computes its statistics in the autocast dtype (no upcast) on large activations (its input x
        # FACTOR, in every run: a norm is scale-invariant, harmless in FP32): fp16 x*x overflows, the output is lost
        eps = float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))
        weight, bias = module.weight, getattr(module, "bias", None)
        centred = bias is not None  # LayerNorm (mean subtracted), else RMSNorm

        def forward(x: torch.Tensor) -> torch.Tensor:
            h = (x * factor).to(torch.get_autocast_dtype(x.device.type) if _low(x) else torch.float32)
            if centred:
                h = h - h.mean(-1, keepdim=True)
            y = (h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps)).to(torch.float32) * weight
            return y + bias if bias is not None else y

        module.forward = forward  # type: ignore[method-assign]
    elif kind == "lowloss":
        # the head's log-softmax computed without its upcast (exp in the autocast dtype on sharpened logits: the sum
        # of exponentials overflows fp16); FP32, or the head kept in FP32, computes it in float32
        def log_softmax(_m: torch.nn.Module, _a: object, out: torch.Tensor) -> torch.Tensor:
            z = (out * factor).to(torch.get_autocast_dtype(out.device.type) if _low(out) else torch.float32)
            return (z - torch.log(torch.exp(z).sum(-1, keepdim=True))).to(torch.float32)

        module.register_forward_hook(log_softmax)
    elif kind == "lostupdate":
        # the module's weights x FACTOR (in every run) and, where it computes in low precision, rounded to bfloat16
        # after each forward: an AdamW update (~lr) below half a bf16 ulp of the weight is lost
        params = list(module.parameters(recurse=False))
        with torch.no_grad():
            for p in params:
                p.mul_(factor)

        def round_low(_m: torch.nn.Module, args: tuple[torch.Tensor, ...], _out: object) -> None:
            if args and isinstance(args[0], torch.Tensor) and _low(args[0]):
                with torch.no_grad():
                    for p in params:
                        p.copy_(p.to(torch.bfloat16).to(p.dtype))

        module.register_forward_hook(round_low)
    else:
        raise SystemExit(f"--plant {spec!r}: unknown kind {kind!r}")


def loss_of(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=FAMILIES, default="qwen2")
    ap.add_argument("--integration", choices=("plain", "hf", "lightning"), default="plain")
    ap.add_argument("--plant", default="", help="KIND:MODULE (see the module's doc)")
    ap.add_argument("--factor", type=float, default=1e5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", default="runs/plant_train.h5")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = build(args.family)
    if args.plant:
        plant(model, args.plant, args.factor)
    data = MarkovText()
    attrs = {"run_key": f"plant-{args.family}-{args.integration}"}
    if args.integration == "plain":
        from ampcheck import Recorder

        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
        batches = iter(loader)
        with Recorder(args.out, model, opt, attributes=attrs, overwrite=True) as rec:
            for _ in range(args.steps):
                loss = loss_of(model, next(batches))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                rec.step(loss)
    elif args.integration == "hf":
        import transformers as tf

        from ampcheck.integrations.hf import AmpcheckCallback

        targs = tf.TrainingArguments(output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "hf"),
                                     max_steps=args.steps, per_device_train_batch_size=BATCH, learning_rate=args.lr,
                                     lr_scheduler_type="constant", weight_decay=0.0, logging_steps=1,
                                     save_strategy="no", report_to=[], seed=args.seed, use_cpu=True,
                                     dataloader_num_workers=0, disable_tqdm=True)
        callback = AmpcheckCallback(args.out, attributes=attrs, overwrite=True)
        callback.train(tf.Trainer(model=model, args=targs, train_dataset=data, callbacks=[callback]))
    else:
        import lightning as L

        from ampcheck.integrations.lightning import AmpcheckLightningCallback

        class Module(L.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def training_step(self, batch: dict[str, torch.Tensor], _i: int) -> torch.Tensor:
                return loss_of(self.model, batch)

            def configure_optimizers(self) -> torch.optim.Optimizer:
                return torch.optim.AdamW(self.parameters(), lr=args.lr, weight_decay=0.0)

        trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            gradient_clip_val=1.0, callbacks=[AmpcheckLightningCallback(args.out, attributes=attrs, overwrite=True)])
        trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True))


if __name__ == "__main__":
    main()
