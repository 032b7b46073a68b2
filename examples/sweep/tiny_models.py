"""Tiny Hugging Face models built from configs (nothing downloaded) and a synthetic language for the sweep examples
(hf_train.py, plain_loop.py, lightning_train.py): the scripts `ampcheck sweep -- <script>` runs in its tests.

The language is a first-order Markov chain over VOCAB tokens (each token has 4 possible successors), so a model learns
it within a few dozen steps. `--plant-overflow MODULE` multiplies that module's weights by a large factor so its
activations overflow fp16 (65504) — a planted fault for `ampcheck sweep --localize` to find.
"""
import os
import sys

import torch

VOCAB, SEQ, BATCH = 64, 32, 8
MODELS = ("gpt2", "llama", "bert", "t5")
OVERFLOW_FACTOR = 1e6  # the planted weights x 1e6: activations of order 1e5, past fp16's largest finite 65504


def import_ampcheck():
    """The installed package (pip install ./python), else the source tree's."""
    try:
        import ampcheck  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


class MarkovText(torch.utils.data.Dataset):
    """n sequences of SEQ tokens cut from one Markov chain; labels = input_ids (causal LM), or a fixed corruption
    for the encoder (bert: masked-LM labels; t5: decoder labels = the sequence)."""

    def __init__(self, n=2048, seed=7):
        g = torch.Generator().manual_seed(seed)
        succ = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
        toks = [1]
        for _ in range(n + SEQ):
            toks.append(int(succ[toks[-1], torch.randint(0, 4, (1,), generator=g)]))
        self.tokens, self.n = torch.tensor(toks), n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.tokens[i:i + SEQ]
        return {"input_ids": x, "labels": x.clone()}


def build(name: str):
    """A tiny model of the family `name` (2 layers, width 32), from a config."""
    import transformers as tf
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        return tf.GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=SEQ,
                             bos_token_id=0, eos_token_id=0, pad_token_id=0)
        return tf.LlamaForCausalLM(cfg)
    if name == "bert":
        cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, pad_token_id=0)
        return tf.BertForMaskedLM(cfg)
    if name == "t5":
        cfg = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                          num_heads=2, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        return tf.T5ForConditionalGeneration(cfg)
    raise SystemExit(f"--model {name!r}: expected one of {', '.join(MODELS)}")


def plant_overflow(model, module_name: str):
    """Multiplies the weights of model.get_submodule(module_name) by OVERFLOW_FACTOR (the planted fault)."""
    try:
        module = model.get_submodule(module_name)
    except AttributeError:
        names = [n for n, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
        raise SystemExit(f"--plant-overflow {module_name!r}: not a module of the model; modules with weights: "
                         f"{', '.join(names[:12])} ...") from None
    with torch.no_grad():
        for p in module.parameters(recurse=False):
            p.mul_(OVERFLOW_FACTOR)
