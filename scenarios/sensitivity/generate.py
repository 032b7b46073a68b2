#!/usr/bin/env python3
"""Writes the sensitivity suite's larger scales from the ci suite's scenarios (the `micro` scale).

Every scenario of scenarios/suites/ci.yaml — each correct strategy, each pitfall, each planted bug, on the `micro`
GPT — is rewritten for the `nano` GPT on the CPU and for GPT-2 124M on the GPU: the workload (model, batch, step
count, learning rate) changes, the strategy, loop knobs, injections and expectation do not, except where a scale
lists an expectation of its own below (with the reason). The output files are committed; run this after editing a
ci scenario (it needs PyYAML):

    python3 scenarios/sensitivity/generate.py

and re-record the references of the scales that changed (`ampcheck record --suite sensitivity-nano`, and the gpu
suite on a GPU). The ci suite's Llama slice (scenarios/llama/) is not rescaled: the Llama scenarios have their GPU
scale written by hand (scenarios/llama/gpu/, llama-150m), which the gpu suite lists after the rescaled ones.
"""
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.dirname(HERE)

# The workload of each scale: replaces the ci scenario's model / data fields and step count, scales its lr.
SCALES = {
    "nano": {
        "suite": "sensitivity-nano",
        "why": "The ci suite's scenarios on the nano GPT (0.8M parameters, 2 x 32 tokens a step) on the CPU: the "
               "sensitivity suite's middle scale.",
        "device": "cpu",
        "model": {"preset": "nano"},
        "data": {"batch_size": 2, "seq_len": 32},
        "lr_scale": 1.0,
        "train": {},
        "skip": ["fp8-unsupported-on-cpu"],  # a refusal on the CPU: the micro scale shows it
        "expect": {
            "fp16-autocast-underflow-no-scaler": ("diverges", "the grads that survive the 1e-5 underflow keep only "
                                                  "fp16-subnormal precision and are multiplied back: noisy updates "
                                                  "raise the loss (5.57 -> 18.1); nothing becomes non-finite"),
            "two-optimizers-inf-in-one": ({"skipped": [1, 2]}, "the dynamic scale 65536 also overflows once (step 15)"),
            "fp16-autocast-activation-overflow": ({"skipped": [2, 3]},
                                                  "the dynamic scale 65536 also overflows once (step 15)"),
        },
    },
    "gpt2": {
        "suite": "gpu",
        "why": "The ci suite's scenarios on GPT-2 124M (8 x 1024 tokens a step) on the GPU: the sensitivity suite's "
               "largest scale; then the Llama scenarios on llama-150m (scenarios/llama/gpu/).",
        "extra": "llama/gpu",  # hand-written scenarios of this scale, listed after the generated ones
        "device": "cuda",
        "model": {"preset": "gpt2-124m"},
        "data": {"batch_size": 8, "seq_len": 1024, "corpus_tokens": 16777216},
        "lr_scale": 0.2,
        "train": {"log_every": 10, "eval_every": 0},
        # Each distinct FP32 reference costs five FP32 GPT-2 runs of GPU time; these pitfalls (clipping around
        # unscale_, accumulation, two optimizers) need four references of their own and are judged at the two CPU
        # scales only.
        "skip": ["clip-after-unscale", "clip-before-unscale", "accumulation", "accumulation-unscale-each-micro-batch",
                 "accumulation-loss-not-divided", "two-losses-two-optimizers", "two-optimizers-inf-in-one",
                 "fp8-unsupported-on-cpu",  # FP8 runs on the GPU: the fp8 suite (scenarios/fp8) judges it
                 "bf16-autocast-chunked-head"],  # not yet run on the H200 (issue 13): the CPU scales judge it
        "expect": {
            "fp16-autocast-underflow-scaled": ({"verdict": "tracks", "warnings": ["zero_grads"]},
                                               "GPT-2's grads are far smaller than micro's: under the 1e-5 injection "
                                               "the scale 65536 no longer rescues them and a third flush to zero "
                                               "(H200, 2026-12-03), yet loss, grad norm and updates track over 60 "
                                               "steps (margins <= 0.58): a zero_grads warning, not a failure"),
            "fp16-autocast-underflow-no-scaler": ("stalls", "the flushed grads stall SGD; nothing blows up"),
            "fp16-pure-underflow-stalls": ("stalls", "GPT-2's true grad norm collapses (the flushed grads) before "
                                           "the loss can climb"),
            "tf32": ({"warnings": None}, "on the GPU TF32 is in effect: no precision warning"),
            "resume-with-scaler-state": ({"skipped": [0, 2]}, "fp16-master-weights-gpt2 skips 2 steps at the start "
                                         "(the scale 65536 overflows its fp16 grads); the resume adds none"),
            "fp16-autocast-activation-overflow": ({"skipped": [2, 5]}, "the dynamic scale 65536 also overflows "
                                                  "GPT-2's fp16 grads in its first steps (3 skips without any "
                                                  "injection)"),
        },
    },
}


def flow(d):
    return yaml.safe_dump(d, default_flow_style=True, sort_keys=False, width=1000).strip()


def scale_scenario(text, name, scale, cfg):
    doc = yaml.safe_load(text)
    out = []
    for line in text.splitlines():
        key = line.split(":", 1)[0] if re.match(r"^[a-z_]+:", line) else None
        if key == "name":
            line = f"name: {name}-{scale}"
        elif key == "device":
            line = f"device: {cfg['device']}"
        elif key == "model":
            m = dict(doc["model"])
            m.update(cfg["model"])
            line = "model: " + flow(m)
        elif key == "data":
            d = dict(doc["data"])
            d.update(cfg["data"])
            if d.get("batch_size") and doc["data"].get("batch_size", 8) < 8:  # accumulation: keep tokens per step
                d["batch_size"] = max(1, cfg["data"]["batch_size"] * doc["data"]["batch_size"] // 8)
            line = "data: " + flow(d)
        elif key == "optimizer":
            o = dict(doc["optimizer"])
            o["lr"] = float(f"{o['lr'] * cfg['lr_scale']:.3g}")
            line = "optimizer: " + flow(o)
        elif key == "train":
            t = dict(doc.get("train") or {})
            t.update(cfg["train"])
            if t.get("eval_every") == 0:
                t.pop("eval_every")
                t.pop("eval_batches", None)
            line = "train: " + flow(t)
        elif key == "expect" and name in cfg["expect"]:
            override, reason = cfg["expect"][name]
            e = dict(doc["expect"])
            e.update(override if isinstance(override, dict) else {"verdict": override})
            e = {k: v for k, v in e.items() if v is not None}  # None: the scale drops that expectation
            line = "expect: " + flow(e) + f"  # at this scale: {reason}"
        out.append(line)
    return f"# Generated by scenarios/sensitivity/generate.py from scenarios/{name}.yaml ({scale} scale). Do not edit.\n" + \
        "\n".join(out) + "\n"


def main():
    ci = yaml.safe_load(open(os.path.join(SCENARIOS, "suites", "ci.yaml")))
    for scale, cfg in SCALES.items():
        folder = os.path.join(HERE, scale)
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(folder):
            if f.endswith(".yaml"):
                os.remove(os.path.join(folder, f))
        listed = []
        for rel in ci["scenarios"]:
            name = os.path.splitext(os.path.basename(rel))[0]
            if name in cfg["skip"] or rel.startswith("llama/"):  # the Llama slice has its own scales (docstring)
                continue
            text = open(os.path.join(SCENARIOS, rel)).read()
            with open(os.path.join(folder, name + ".yaml"), "w") as fh:
                fh.write(scale_scenario(text, name, scale, cfg))
            listed.append(f"sensitivity/{scale}/{name}.yaml")
        if cfg.get("extra"):
            extra = os.path.join(SCENARIOS, cfg["extra"])
            listed += [f"{cfg['extra']}/{f}" for f in sorted(os.listdir(extra)) if f.endswith(".yaml")]
        with open(os.path.join(SCENARIOS, "suites", cfg["suite"] + ".yaml"), "w") as fh:
            fh.write("# Generated by scenarios/sensitivity/generate.py. Do not edit.\n")
            fh.write("why: \"" + cfg["why"] + "\"\nscenarios:\n" + "".join(f"  - {p}\n" for p in listed))
        print(f"{scale}: {len(listed)} scenarios -> {os.path.relpath(folder, SCENARIOS)}", file=sys.stderr)


if __name__ == "__main__":
    main()
