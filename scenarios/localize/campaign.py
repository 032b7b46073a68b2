#!/usr/bin/env python3
"""The localization campaign (issue 52): seeded draws of planted precision faults in tiny transformers models, each
localized by `ampcheck sweep --localize` under fp16 autocast + GradScaler, scored against the planted module.

    python3 scenarios/localize/campaign.py --seed 1 --cases 12 --ampcheck build/ampcheck --out /tmp/loc-A   # draw A
    python3 scenarios/localize/campaign.py --seed 2 --cases 60 --ampcheck build/ampcheck --out /tmp/loc-B   # draw B
    python3 scenarios/localize/campaign.py --seed 2 --cases 60 --list                                        # the draw

A case: a model family (built from a config by plant_train.py), a site (attention q / k — logit overflow —, attention
output, MLP in / out, a norm, the embedding, the head), a kind (weight outlier, activation spike from a forward hook, a
norm without its upcast, the head's log-softmax in low precision, lost updates) and an integration (plain loop, HF
Trainer, Lightning). Scores, against the planted module P:

  exact      the set found is {P}
  block      every module found is P, an ancestor of P or inside P's layer (the block that holds P: an attention
             block whose core must run in FP32 with the planted projection, the MLP around its activation)
  wrong      anything else found
  cannot     nothing named (the localization's message is the reason)
  no effect  the strategy tracks FP32 with the plant in place: nothing to localize (listed, not scored)
  invalid    the plant makes the FP32 run itself non-finite, or names no module of the model (a generator error, since
             fixed: gpt_neox's head is `lm_head` in transformers 5): no reference, nothing to localize (not scored)

Writes OUT/cases.json (one entry per case: the draw, the command, the answer, the score) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "plant_train.py")

# per family: site -> module name pattern ({i}: the layer), and which sites it has
SITES: dict[str, dict[str, str]] = {
    "gpt2": {
        "attn_qk": "transformer.h.{i}.attn.c_attn",
        "attn_out": "transformer.h.{i}.attn.c_proj",
        "mlp_in": "transformer.h.{i}.mlp.c_fc",
        "mlp_out": "transformer.h.{i}.mlp.c_proj",
        "norm": "transformer.h.{i}.ln_1",
        "embed": "transformer.wte",
        "head": "lm_head",
    },
    "llama": {
        "attn_q": "model.layers.{i}.self_attn.q_proj",
        "attn_k": "model.layers.{i}.self_attn.k_proj",
        "attn_out": "model.layers.{i}.self_attn.o_proj",
        "mlp_in": "model.layers.{i}.mlp.up_proj",
        "mlp_out": "model.layers.{i}.mlp.down_proj",
        "norm": "model.layers.{i}.input_layernorm",
        "embed": "model.embed_tokens",
        "head": "lm_head",
    },
    "bert": {
        "attn_q": "bert.encoder.layer.{i}.attention.self.query",
        "attn_k": "bert.encoder.layer.{i}.attention.self.key",
        "attn_out": "bert.encoder.layer.{i}.attention.output.dense",
        "mlp_in": "bert.encoder.layer.{i}.intermediate.dense",
        "mlp_out": "bert.encoder.layer.{i}.output.dense",
        "norm": "bert.encoder.layer.{i}.attention.output.LayerNorm",
        "embed": "bert.embeddings.word_embeddings",
        "head": "cls.predictions.decoder",
    },
    "t5": {
        "attn_q": "encoder.block.{i}.layer.0.SelfAttention.q",
        "attn_k": "encoder.block.{i}.layer.0.SelfAttention.k",
        "attn_out": "encoder.block.{i}.layer.0.SelfAttention.o",
        "mlp_in": "encoder.block.{i}.layer.1.DenseReluDense.wi",
        "mlp_out": "encoder.block.{i}.layer.1.DenseReluDense.wo",
        "norm": "encoder.block.{i}.layer.0.layer_norm",
        "embed": "shared",
        "head": "lm_head",
    },
    "opt": {
        "attn_q": "model.decoder.layers.{i}.self_attn.q_proj",
        "attn_k": "model.decoder.layers.{i}.self_attn.k_proj",
        "attn_out": "model.decoder.layers.{i}.self_attn.out_proj",
        "mlp_in": "model.decoder.layers.{i}.fc1",
        "mlp_out": "model.decoder.layers.{i}.fc2",
        "norm": "model.decoder.layers.{i}.self_attn_layer_norm",
        "embed": "model.decoder.embed_tokens",
        "head": "lm_head",
    },
    "gpt_neox": {
        "attn_qk": "gpt_neox.layers.{i}.attention.query_key_value",
        "attn_out": "gpt_neox.layers.{i}.attention.dense",
        "mlp_in": "gpt_neox.layers.{i}.mlp.dense_h_to_4h",
        "mlp_out": "gpt_neox.layers.{i}.mlp.dense_4h_to_h",
        "norm": "gpt_neox.layers.{i}.input_layernorm",
        "embed": "gpt_neox.embed_in",
        "head": "lm_head",
    },
    "phi": {
        "attn_q": "model.layers.{i}.self_attn.q_proj",
        "attn_k": "model.layers.{i}.self_attn.k_proj",
        "attn_out": "model.layers.{i}.self_attn.dense",
        "mlp_in": "model.layers.{i}.mlp.fc1",
        "mlp_out": "model.layers.{i}.mlp.fc2",
        "norm": "model.layers.{i}.input_layernorm",
        "embed": "model.embed_tokens",
        "head": "lm_head",
    },
}
SITES["qwen2"] = dict(SITES["llama"])
SITES["mistral"] = dict(SITES["llama"])

# kind -> (the sites it plants at, its factor)
KINDS: dict[str, tuple[tuple[str, ...], float]] = {
    "weight": (("attn_q", "attn_k", "attn_qk", "attn_out", "mlp_in", "mlp_out"), 1e6),
    "spike": (("attn_q", "attn_k", "attn_qk", "attn_out", "mlp_in", "mlp_out", "embed"), 1e6),
    # 1e4, not 1e3 (draw B: 8 of 9 without effect — the residual stream of these models is ~0.02-0.1 at init, so x1e3
    # squares stay below fp16's 65504; x1e4 overflows them): the plant's strength, not a localization rule
    "noupcast": (("norm",), 1e4),
    "lowloss": (("head",), 20.0),
    "lostupdate": (("attn_out", "mlp_in", "mlp_out"), 1e3),
}
INTEGRATIONS = (("plain", 0.6), ("hf", 0.25), ("lightning", 0.15))


def draw(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    families = sorted(SITES)
    cases = []
    for k in range(n):
        family = families[k % len(families)] if k < len(families) else rng.choice(families)
        kind = rng.choice(sorted(KINDS))
        sites = [s for s in KINDS[kind][0] if s in SITES[family]]
        site = rng.choice(sites)
        module = SITES[family][site].format(i=rng.randrange(2))
        r, integration = rng.random(), "plain"
        for name, p in INTEGRATIONS:
            if r < p:
                integration = name
                break
            r -= p
        cases.append(
            {
                "case": k,
                "family": family,
                "site": site,
                "kind": kind,
                "module": module,
                "factor": KINDS[kind][1],
                "integration": integration,
            }
        )
    return cases


def layer_of(name: str) -> str:
    """The block that holds a module: its name up to the first numeric component and the next one ("...layers.1")."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return name


def score(planted: str, row: dict[str, Any]) -> tuple[str, str]:
    if row.get("verdict") == "tracks" or row.get("pass"):
        return "no effect", f"the strategy tracks FP32 with the plant ({row.get('verdict')})"
    loc = row.get("localization")
    if not loc:
        return "cannot", "not localized: " + str(row.get("message", ""))[-200:]
    if not loc.get("found"):
        return "cannot", loc.get("message", "")
    found = loc.get("modules", [])
    if found == [planted]:
        return "exact", ", ".join(found)
    block = layer_of(planted)

    def related(m: str) -> bool:
        return m == planted or planted.startswith(m + ".") or (block != planted and m.startswith(block + "."))

    covers = any(m == planted or planted.startswith(m + ".") for m in found)
    if covers and all(related(m) for m in found):
        return "block", ", ".join(found)
    return "wrong", ", ".join(m or "(whole model)" for m in found)


def planted_name(c: dict[str, Any]) -> str:
    """The planted module as the recording names it: Lightning's recording names the LightningModule's modules (the
    transformers model is its attribute `model`)."""
    return ("model." if c["integration"] == "lightning" else "") + c["module"]


def rescore(c: dict[str, Any]) -> dict[str, Any]:
    """A case's score again from its answer (the modules found), with planted_name; a case whose plant breaks the FP32
    run itself (the sweep refuses: no reference) is `invalid`, not scored."""
    answer = c.get("answer", "")
    if "FP32 reference run must complete" in answer or "did not complete" in answer or "has no attribute" in answer:
        return dict(c, score="invalid")
    if c.get("score") not in ("exact", "block", "wrong"):
        return c
    found = [m if m != "(whole model)" else "" for m in c["answer"].split(", ")]
    row = {"verdict": c.get("verdict"), "localization": {"found": True, "modules": found}}
    return dict(c, score=score(planted_name(c), row)[0])


def run_case(c: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out = os.path.join(os.path.abspath(args.out), f"case-{c['case']:03d}")
    cmd = [
        args.ampcheck,
        "sweep",
        "--steps",
        str(args.steps),
        "--localize",
        "--strategies",
        "fp16-autocast-scaler",
        "--out",
        out,
        "--",
        sys.executable,
        TRAIN,
        "--family",
        c["family"],
        "--integration",
        c["integration"],
        "--steps",
        str(args.steps),
        "--factor",
        str(c["factor"]),
        "--plant",
        f"{c['kind']}:{c['module']}",
        "--out",
        os.path.join(out, "script.h5"),
    ]
    t0 = time.time()
    p = subprocess.run(["nice", "-n", "5", *cmd], capture_output=True, text=True, timeout=1800, check=False)
    c = dict(c, command=" ".join(cmd[1:]), seconds=round(time.time() - t0, 1), exit=p.returncode)
    try:
        with open(os.path.join(out, "sweep.json")) as f:
            row = json.load(f)["strategies"][0]
    except (OSError, KeyError, IndexError, ValueError):
        c.update(score="cannot", answer="the sweep wrote no row: " + (p.stdout + p.stderr)[-300:])
        return c
    c["score"], c["answer"] = score(planted_name(c), row)
    loc = row.get("localization") or {}
    c["probes"] = loc.get("probes", 0)
    c["verdict"] = row.get("verdict")
    c["message"] = re.sub(r"\s+", " ", row.get("message", ""))[-600:]
    found = re.search(r"first non-finite: module .*?(?=; localized:|$)", re.sub(r"\s+", " ", row.get("message", "")))
    c["nonfinite"] = found.group(0) if found else ""
    return c


def op_score(c: dict[str, Any]) -> tuple[str, str]:
    """The first non-finite operation's answer against the plant (issue 52's operation trace): the module the
    operation ran in — a backward node's own "(<call> in <module>)", the first non-finite module for a forward
    operation — is the planted one or inside it (exact), in the planted module's layer or an ancestor of it (block),
    elsewhere (wrong); no operation named (cannot, with the trace's reason: the failure did not recur in the traced
    steps, the run ended first, or only "the gradient reaching it was already non-finite"). "" where the run named no
    first non-finite module (nothing to trace)."""
    text = c.get("nonfinite", "")
    m = re.match(
        r"first non-finite: module (\S+) \((forward|backward)\) at step \d+(?:; first non-finite operation: (.*))?",
        text,
    )
    if not m:
        return "", ""
    module, pass_, op = m.group(1), m.group(2), m.group(3) or ""
    node = re.search(
        r"the first operation whose backward made a gradient non-finite: (\S+ \((?:inside )?\S+ in (\S+)\).*)", op
    )
    if node:  # a backward node named (after the module's own note, if any)
        op, where = node.group(1), node.group(2)
    elif not op:
        return "cannot", f"no operation named ({pass_} of {module}: the run ended before a step could be traced)"
    elif op.startswith("none") or op.startswith("in "):
        return "cannot", op[:160]
    elif pass_ == "backward":
        inside = re.match(r"\S+ \((?:inside )?\S+ in (\S+)\)", op)
        where = inside.group(1) if inside else module
    else:
        inside = re.search(r" in (\S+) \(forward", op)
        where = inside.group(1) if inside else module
    planted = planted_name(c)
    block = layer_of(planted)
    if where == planted or where.startswith(planted + "."):
        return "exact", op[:160]
    if planted.startswith(where + ".") or (block != planted and where.startswith(block + ".")):
        return "block", f"in {where}: {op[:140]}"
    return "wrong", f"in {where}: {op[:140]}"


def load(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return list(json.load(f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ampcheck", default="build/ampcheck")
    ap.add_argument("--out", default="/tmp/localize-campaign")
    ap.add_argument("--first", type=int, default=0, help="start at this case (resume)")
    ap.add_argument("--last", type=int, default=-1, help="stop before this case (split a draw over processes)")
    ap.add_argument("--list", action="store_true", help="print the draw only")
    ap.add_argument("--table", nargs="*", metavar="CASES_JSON", help="print the table of these cases.json files only")
    args = ap.parse_args()
    if args.table:
        table([c for p in args.table for c in load(p)])
        return
    cases = draw(args.seed, args.cases)
    if args.list:
        for c in cases:
            print(json.dumps(c))
        return
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "cases.json")
    done = load(path) if os.path.exists(path) else []
    have = {c["case"] for c in done}
    for c in cases[args.first : args.last if args.last >= 0 else None]:
        if c["case"] in have:
            continue
        r = run_case(c, args)
        done.append(r)
        with open(path, "w") as f:
            json.dump(done, f, indent=1)
        print(
            f"{r['case']:3d} {r['family']:9s} {r['integration']:9s} {r['kind']:10s} {r['module']:45s} "
            f"{r['score']:9s} {r.get('probes', 0):2d} probes {r['seconds']:6.1f}s  {r['answer'][:120]}",
            flush=True,
        )
    table(done)


def table(done: list[dict[str, Any]]) -> None:
    done = [rescore(c) for c in done]
    scored = [c for c in done if c["score"] not in ("no effect", "invalid")]
    counts = {k: sum(c["score"] == k for c in scored) for k in ("exact", "block", "wrong", "cannot")}
    n = max(len(scored), 1)
    invalid = sum(c["score"] == "invalid" for c in done)
    print(
        f"\n{len(done)} cases, {len(done) - len(scored) - invalid} without effect, {invalid} invalid (the plant breaks "
        f"FP32), {len(scored)} scored:"
    )
    for k, v in counts.items():
        print(f"  {k:7s} {v:3d}  {100 * v / n:5.1f}%")
    print(f"  exact or block: {100 * (counts['exact'] + counts['block']) / n:.1f}%")
    by: dict[str, dict[str, int]] = {}
    for c in scored:
        by.setdefault(c["kind"], {}).setdefault(c["score"], 0)
        by[c["kind"]][c["score"]] += 1
    for kind, s in sorted(by.items()):
        print(f"  {kind:10s} {s}")
    ops = [(c, *op_score(c)) for c in done if "nonfinite" in c]
    traced = [o for o in ops if o[1]]
    if traced:
        op_counts = {k: sum(o[1] == k for o in traced) for k in ("exact", "block", "wrong", "cannot")}
        print(
            f"\nfirst non-finite operation ({len(traced)} cases that named a first non-finite module, effect or not):"
        )
        for k, v in op_counts.items():
            print(f"  {k:7s} {v:3d}  {100 * v / len(traced):5.1f}%")
        for c, sc, why in traced:
            if sc != "exact":
                print(f"  case {c['case']} ({c['family']}, {c['kind']}, {c['module']}): {sc}: {why}")


if __name__ == "__main__":
    main()
