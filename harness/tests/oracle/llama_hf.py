"""transformers' LlamaForCausalLM built from ampcheck's llama config and weights: forward logits and one step's
gradients, for harness/tests/llama_parity_test.cpp.

Reads an ampcheck checkpoint file (the format of gpt_oracle.py) holding the engine's parameters under their own
names, which are HF's state-dict names ("model/model.layers.0.self_attn.q_proj.weight", ...), plus "inputs" and
"targets" (B, T) int64 and the config in meta; builds LlamaConfig from the meta, loads the state dict strictly (a
name or shape that does not map one to one fails here), runs model(inputs).logits in float32 with the requested
attention implementation, the mean next-token cross-entropy on logits.float() against targets, backward, and writes
"logits", "loss" and "grad/<name>" (float32). Usage: llama_hf.py IN OUT [IN OUT ...] (one OUT per IN: the test's
configurations in one process, one transformers import)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_oracle import read, write  # noqa: E402  (the checkpoint format's reader and writer)

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def compare(in_path, out_path):
    meta, t = read(in_path)
    tied = bool(meta["tie_embeddings"])
    cfg = LlamaConfig(
        vocab_size=meta["vocab_size"],
        hidden_size=meta["n_embd"],
        intermediate_size=meta["mlp_hidden"],
        num_hidden_layers=meta["n_layer"],
        num_attention_heads=meta["n_head"],
        num_key_value_heads=meta["n_kv_head"],
        max_position_embeddings=meta["block_size"],
        rms_norm_eps=meta["rms_norm_eps"],
        rope_parameters={"rope_type": "default", "rope_theta": meta["rope_theta"]},
        tie_word_embeddings=tied,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        attention_dropout=0.0,
    )
    cfg._attn_implementation = meta["attention"]  # "sdpa" or "eager", as the engine ran
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float()
    state = {k[len("model/"):]: v for k, v in t.items() if k.startswith("model/")}
    if tied:  # the engine registers the tied weight once, as model.embed_tokens.weight
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, f"names HF's Llama does not have: {unexpected}"
    assert not missing, f"HF's Llama parameters the engine did not export: {missing}"
    model.train()
    logits = model(input_ids=t["inputs"]).logits  # (B, T, V)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), t["targets"].reshape(-1))
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(())}
    for name, p in model.named_parameters():  # a tied weight appears once, as model.embed_tokens.weight
        out["grad/" + name] = p.grad
    write(out_path, {"torch": torch.__version__}, out)


def main():
    args = sys.argv[1:]
    assert args and len(args) % 2 == 0, "usage: llama_hf.py IN OUT [IN OUT ...]"
    for i in range(0, len(args), 2):
        compare(args[i], args[i + 1])


if __name__ == "__main__":
    main()
