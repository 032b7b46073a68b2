#!/usr/bin/env python3
"""Writes a randomized calibration campaign: workloads drawn at random over the space users train in, and per
workload several correct mixed-precision setups and several planted bugs (scenarios/campaign/README.md).

    python3 scenarios/campaign/generate.py --seed 2026 --workloads 70 --out reports/campaign/full

Deterministic in (--seed, --workloads): the same arguments write the same files. Writes into --out:

    scenarios/<name>.yaml   one ampcheck scenario per file (strict format of harness/scenario/scenario.cpp); its
                            first line is a comment naming the workload, kind and class
    manifest.jsonl          one row per scenario: name, file, workload, kind (correct | bug), strategy, variant or
                            bug class, magnitude and placement, expect, twin (the correct scenario of the same
                            workload and strategy without the bug, for the effect measure), est_cost_s
    workloads.jsonl         one row per workload: model, data, optimizer, schedule, loop, estimated cost
    campaign.json           the arguments, counts and the estimated cost

Every scenario of a workload shares one FP32 reference: the reference key (harness/reference/reference_store.cpp
reference_key) keeps model, data, optimizer, schedule, steps, micro_batches, clip max_norm, eval and two_optimizers,
and drops strategy, injections and the loop pitfalls. So everything that is in the key — accumulation, clipping,
two optimizers — is drawn per workload, and the pitfalls that need it (loss not divided, unscale_ per micro-batch,
clipping before unscale_) are drawn only for workloads that have it. Only the standard library is needed.
"""
import argparse
import json
import math
import os
import random
import sys

# --------------------------------------------------------------------------------------------------------------
# cost model (2-core CPU, one intra-op thread per process; measured on the micro GPT and a 4 x 96 GPT):
# one optimizer step ~ micro_batches x (6.5 ms + 2.4e-10 s x parameters x tokens per micro-batch); +0.3 s a process.
STEP_OVERHEAD_S = 0.0065
STEP_PER_PARAM_TOKEN_S = 2.4e-10
# the whole campaign should stay within ~20-25 minutes on 2 cores: a cap per workload (5 FP32 reference trainings +
# its scenarios), redrawn above it
MAX_WORKLOAD_COST_S = 75.0


def gpt_params(L, C, V, T):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def llama_params(L, C, H, K, I, V, tied):
    D = C // H
    per_layer = C * H * D * 2 + C * K * D * 2 + 3 * C * I + 2 * C
    return V * C * (1 if tied else 2) + L * per_layer + C


def mlp_params(L, C, H, V):
    p = V * C
    fan = C
    for _ in range(L):
        p += fan * H + H
        fan = H
    return p + fan * V + V


def step_cost(w):
    tokens = w["data"]["batch_size"] * w["data"]["seq_len"]
    return w["train"]["micro_batches"] * (STEP_OVERHEAD_S + STEP_PER_PARAM_TOKEN_S * w["params"] * tokens)


def loguniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def sig(x, digits=3):
    """A float rounded to a few significant digits, written so that YAML reads it as a float."""
    if x == 0:
        return 0.0
    return float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------------------------------------------
# workloads

def draw_workload(rng, wid, llama=0.0):
    """llama: the fraction of the transformer workloads drawn as Llama-style decoders (RMSNorm, RoPE, SwiGLU, GQA);
    0 keeps the random stream of the campaigns drawn before the llama model existed."""
    w = {"id": wid}
    kind = "gpt" if rng.random() < 0.8 else "mlp"
    if kind == "gpt" and llama > 0 and rng.random() < llama:
        kind = "llama"
    seq_len = rng.choice([16, 24, 32, 48, 64])
    vocab = rng.choice([128, 256])
    if kind == "llama":
        n_head = rng.choice([2, 4, 4, 8])
        n_kv = rng.choice([k for k in (1, 2, 4, 8) if n_head % k == 0])
        widths = [c for c in range(16, 129, 16) if c % n_head == 0 and (c // n_head) % 4 == 0]
        n_embd = rng.choice(widths)
        hidden = max(16, int(round(n_embd * rng.uniform(2.0, 3.5) / 16)) * 16)
        n_layer = rng.choices([1, 2, 3, 4], weights=[3, 4, 2, 1])[0]
        block = max(seq_len, rng.choice([32, 64]))
        tied = rng.random() < 0.3
        w["model"] = {"kind": "llama", "preset": "llama-micro", "n_layer": n_layer, "n_head": n_head,
                      "n_kv_head": n_kv, "n_embd": n_embd, "mlp_hidden": hidden, "block_size": block,
                      "vocab_size": vocab, "rope_theta": rng.choice([10000.0, 500000.0]),
                      "tie_embeddings": "true" if tied else "false"}
        w["params"] = llama_params(n_layer, n_embd, n_head, n_kv, hidden, vocab, tied)
    elif kind == "gpt":
        n_head = rng.choice([1, 2, 2, 3, 4, 4])
        widths = [c for c in range(16, 97, 4) if c % n_head == 0 and (c // n_head) % 4 == 0]
        n_embd = rng.choice(widths)
        n_layer = rng.choices([1, 2, 3, 4], weights=[3, 4, 2, 1])[0]
        block = max(seq_len, rng.choice([32, 64]))
        w["model"] = {"kind": "gpt", "preset": "micro", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
                      "block_size": block, "vocab_size": vocab}
        w["params"] = gpt_params(n_layer, n_embd, vocab, block)
    else:
        n_layer = rng.choice([1, 1, 2, 3])
        n_embd = rng.choice(range(16, 97, 8))
        hidden = rng.choice(range(32, 257, 16))
        block = max(seq_len, 32)
        w["model"] = {"kind": "mlp", "preset": "tiny", "n_layer": n_layer, "n_embd": n_embd, "mlp_hidden": hidden,
                      "block_size": block, "vocab_size": vocab}
        w["params"] = mlp_params(n_layer, n_embd, hidden, vocab)
    w["seed"] = rng.randrange(1, 10**6)
    w["data"] = {"kind": "synthetic", "batch_size": rng.choice([2, 4, 4, 8, 8, 16]), "seq_len": seq_len,
                 "corpus_tokens": 262144, "branching": rng.choice([2, 4, 4, 8]), "seed": rng.randrange(1, 10**6)}
    if rng.random() < 0.7:
        w["optimizer"] = {"kind": "adamw", "lr": sig(loguniform(rng, 1e-4, 3e-2)),
                          "betas": [sig(rng.uniform(0.85, 0.95), 2), rng.choice([0.95, 0.98, 0.99, 0.999])],
                          "weight_decay": rng.choice([0.0, 0.01, 0.1])}
    else:
        w["optimizer"] = {"kind": "sgd", "lr": sig(loguniform(rng, 1e-3, 1e-1)), "momentum": rng.choice([0.0, 0.9]),
                          "weight_decay": 0.0}
    # steps: most 60-150, some up to 300, a few up to 500 (redrawn below if the workload gets too expensive)
    u = rng.random()
    steps = rng.randrange(60, 151) if u < 0.7 else rng.randrange(150, 301) if u < 0.9 else rng.randrange(300, 501)
    if rng.random() < 0.6:
        w["schedule"] = {"kind": "cosine", "warmup_steps": rng.randrange(0, max(1, steps // 4)),
                         "min_lr_ratio": rng.choice([0.0, 0.1])}
    else:
        w["schedule"] = {"kind": "constant"}
    w["train"] = {"steps": steps, "micro_batches": rng.choices([1, 2, 4, 8], weights=[45, 30, 20, 5])[0]}
    if rng.random() < 0.4:
        w["train"]["clip"] = sig(loguniform(rng, 0.1, 2.0), 2)
    if kind in ("gpt", "llama") and rng.random() < 0.15:
        w["train"]["two_optimizers"] = True
        w["train"]["aux_loss_weight"] = sig(loguniform(rng, 1e-5, 1e-3), 2)
    return w


def param_globs(w):
    m = w["model"]
    if m["kind"] == "gpt":
        last = m["n_layer"] - 1
        return ["*", "wte", "h.0.*", f"h.{last}.mlp.*", "h.0.attn.c_attn.weight", "ln_f.*", f"h.{last}.attn.*"]
    if m["kind"] == "llama":
        last = m["n_layer"] - 1
        return ["*", "model.embed_tokens.weight", "model.layers.0.*", f"model.layers.{last}.mlp.*",
                "model.layers.0.self_attn.q_proj.weight", "model.norm.*", f"model.layers.{last}.self_attn.*"]
    return ["*", "embed", "fc.0.*", "head.*", f"fc.{m['n_layer'] - 1}.weight"]


# --------------------------------------------------------------------------------------------------------------
# scenarios of a workload

class Scenario:
    def __init__(self, w, name, kind, strategy, label, why, expect, **meta):
        self.w = w
        self.name = name
        self.kind = kind            # correct | bug
        self.strategy = strategy    # the scenario's strategy: a preset name or a mapping
        self.label = label          # correct: variant; bug: class
        self.why = why
        self.expect = expect        # dict: verdict (+ error)
        self.train = {}             # extra train fields (pitfalls, resume)
        self.model = {}             # extra model fields (attention_query_dtype)
        self.inject = []
        self.meta = meta


def strategy_label(s):
    return s if isinstance(s, str) else s["preset"] + "".join(
        f"+{k}" for k in ("scaler",) if k in s)


def correct_scenarios(rng, w):
    p = f"w{w['id']:03d}"
    t = w["train"]
    steps = t["steps"]
    out = []
    loop = []
    if t["micro_batches"] > 1:
        loop.append(f"accumulation over {t['micro_batches']} micro-batches with the loss divided")
    if "clip" in t:
        loop.append(f"clipping at {t['clip']} after unscale_")
    if t.get("two_optimizers"):
        loop.append("two optimizers sharing one scaler")
    ctx = (" (" + ", ".join(loop) + ")") if loop else ""
    out.append(Scenario(w, f"{p}-c-fp16-autocast", "correct", "fp16-autocast", "plain",
                        "fp16 autocast with a dynamic GradScaler" + ctx + ": a correct setup.", {"verdict": "tracks"}))
    out.append(Scenario(w, f"{p}-c-bf16-autocast", "correct", "bf16-autocast", "plain",
                        "bf16 autocast" + ctx + ": a correct setup.", {"verdict": "tracks"}))
    out.append(Scenario(w, f"{p}-c-fp16-master", "correct", "fp16-master", "plain",
                        "fp16 parameters with fp32 master weights and a dynamic GradScaler" + ctx + ": a correct setup.",
                        {"verdict": "tracks"}))
    e = rng.randrange(10, 15)
    out.append(Scenario(w, f"{p}-c-fp16-static", "correct",
                        {"preset": "fp16-static", "scaler": {"kind": "static", "init_scale": 2 ** e}}, "plain",
                        f"fp16 autocast with a static loss scale 2^{e}, at least 4x below the dynamic GradScaler's "
                        f"starting 2^16" + ctx + ": a correct setup.", {"verdict": "tracks"},
                        magnitude=2 ** e, placement=f"static scale 2^{e}"))
    # one more correct variant: a planted overflow the dynamic scaler skips, or a resume with the scaler's state
    base = rng.choice(["fp16-autocast", "fp16-master"])
    if rng.random() < 0.5:
        n = rng.choice([1, 1, 2])
        at = sorted(rng.sample(range(3, steps - 3), n))
        glob = rng.choice(param_globs(w))
        value = rng.choice(["inf", "inf", "-inf", "nan"])
        if value == "nan" and w["train"].get("two_optimizers") and "clip" in w["train"]:
            # a NaN in one group's grads makes a clip over both groups NaN, and the group whose unscale_ found no
            # inf steps with NaN grads: PyTorch's real behaviour, a pitfall of its own, not a correct setup (the
            # first campaign's w003-c-fp16-master-overflow went non-finite so)
            value = "inf"
        s = Scenario(w, f"{p}-c-{base}-overflow", "correct", base, "overflow-skipped",
                     f"{value} planted in the grads of '{glob}' at step(s) {at} under {base}{ctx}: the dynamic "
                     f"GradScaler skips those steps and backs off; training recovers.",
                     {"verdict": "tracks"}, placement=f"steps {at} params {glob} value {value}", magnitude=n)
        s.inject.append({"kind": "grad", "steps": at, "value": value, "params": glob})
        s.twin = f"{p}-c-{base}"
    else:
        at = rng.randrange(max(1, steps // 5), steps - 5)
        s = Scenario(w, f"{p}-c-{base}-resume", "correct", base, "resume-scaler",
                     f"A restart at step {at} under {base}{ctx} that restores the GradScaler's state continues as "
                     f"the uninterrupted run.", {"verdict": "tracks"}, placement=f"resume at step {at}",
                     magnitude=at)
        s.train["resume"] = {"at_step": at, "restore_scaler": True}
        s.twin = f"{p}-c-{base}"
    out.append(s)
    for s in out:
        if not hasattr(s, "twin"):
            s.twin = None
    return out


# bug classes: (name, weight, decided_by, eligible(w), make(rng, w, prefix) -> Scenario)
def bug_classes():
    E = lambda **kw: kw

    def zero_grad_bf16(rng, w, p):
        s = Scenario(w, f"{p}-b-zero-grad-bf16", "bug", "bf16-autocast", "zero_grad_forgotten_bf16",
                     "optimizer.zero_grad() forgotten under bf16 autocast: every step adds its gradient to all the "
                     "earlier ones.", E(verdict="diverges"), placement="every step", magnitude=None)
        s.train["zero_grad"] = False
        s.twin = f"{p}-c-bf16-autocast"
        return s

    def zero_grad_fp16(rng, w, p):
        s = Scenario(w, f"{p}-b-zero-grad-fp16-scaler", "bug", "fp16-autocast", "zero_grad_forgotten_fp16_scaler",
                     "optimizer.zero_grad() forgotten under fp16 autocast with a GradScaler: unscale_ divides the "
                     "accumulated stale grads by the scale every step, so the leak shrinks geometrically "
                     "(expected little or no effect).", E(verdict="tracks"), placement="every step", magnitude=None)
        s.train["zero_grad"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def loss_not_divided(rng, w, p):
        m = w["train"]["micro_batches"]
        strat = rng.choice(["fp16-autocast", "bf16-autocast"])
        s = Scenario(w, f"{p}-b-loss-not-divided-{strat.split('-')[0]}", "bug", strat, "loss_not_divided",
                     f"Gradient accumulation over {m} micro-batches without dividing the loss ({strat}): the grads "
                     f"are {m}x too large.", E(verdict="diverges"), magnitude=m, placement=f"micro_batches {m}")
        s.train["divide_loss_by_micro_batches"] = False
        s.twin = f"{p}-c-{strat}"
        return s

    def clip_before_unscale(rng, w, p):
        e = rng.randrange(10, 17)
        s = Scenario(w, f"{p}-b-clip-before-unscale", "bug",
                     {"preset": "fp16-autocast", "scaler": {"kind": "dynamic", "init_scale": 2 ** e}},
                     "clip_before_unscale",
                     f"Clipping the still-scaled grads (scale 2^{e}) at max_norm {w['train']['clip']} before "
                     f"unscale_: the true grads end up clipped to max_norm / scale.", E(verdict="stalls"),
                     magnitude=2 ** e, placement=f"max_norm {w['train']['clip']} scale 2^{e}")
        s.train["clip_unscale_first"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def loss_not_scaled(rng, w, p):
        e = rng.randrange(8, 17)
        s = Scenario(w, f"{p}-b-loss-not-scaled", "bug",
                     {"preset": "fp16-autocast", "scaler": {"kind": "dynamic", "init_scale": 2 ** e}},
                     "loss_not_scaled",
                     f"scaler.scale(loss) computed but the plain loss backpropagated (scale 2^{e}), unscale_/step/"
                     f"update kept: the true grads are divided by the scale.", E(verdict="stalls"),
                     magnitude=2 ** e, placement=f"scale 2^{e}")
        s.train["scale_loss"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def static_too_large(rng, w, p):
        e = rng.randrange(24, 33)
        s = Scenario(w, f"{p}-b-static-scale-2e{e}", "bug",
                     {"preset": "fp16-static", "scaler": {"kind": "static", "init_scale": 2 ** e}},
                     "static_scale_too_large",
                     f"fp16 autocast with a static loss scale 2^{e}: the scaled grads overflow fp16 and the steps "
                     f"are skipped.", E(verdict="stalls"), magnitude=2 ** e, placement=f"static scale 2^{e}")
        s.twin = f"{p}-c-fp16-static"
        return s

    def bf16_pure(rng, w, p):
        s = Scenario(w, f"{p}-b-bf16-pure", "bug", "bf16-pure", "bf16_pure",
                     f"Pure bf16 (model.to(bfloat16), no fp32 master weights) at lr {w['optimizer']['lr']}: updates "
                     f"below half a bf16 ulp of a weight are lost.", E(verdict="stalls"),
                     magnitude=w["optimizer"]["lr"], placement=f"lr {w['optimizer']['lr']}")
        s.twin = f"{p}-c-bf16-autocast"
        return s

    def fp16_pure_adamw(rng, w, p):
        s = Scenario(w, f"{p}-b-fp16-pure-adamw", "bug", "fp16-pure", "fp16_pure_adamw",
                     "Pure fp16 AdamW (model.half(), no master weights, no scaler): eps and the second moment "
                     "underflow in fp16.", E(verdict="diverges"), magnitude=None, placement="")
        s.twin = f"{p}-c-fp16-master"
        return s

    def underflow(rng, w, p):
        factor = sig(10 ** rng.uniform(-7, -4), 2)
        start = rng.randrange(0, w["train"]["steps"] // 2)
        half = w["optimizer"]["kind"] == "sgd" and rng.random() < 0.5
        if half:
            strat, where, twin = "fp16-pure", ".half()", f"{p}-c-fp16-master"
        else:
            strat, where, twin = {"preset": "fp16-autocast", "scaler": {"kind": "none"}}, "fp16 autocast", \
                f"{p}-c-fp16-autocast"
        s = Scenario(w, f"{p}-b-underflow-{'half' if half else 'autocast'}", "bug", strat, "underflow_no_scaler",
                     f"Loss x {factor} before backward from step {start} (grads scaled back after it) in {where} "
                     f"without a loss scaler: small grads flush to zero in fp16.", E(verdict="stalls"),
                     magnitude=factor, placement=f"from step {start} in {where}")
        s.inject.append({"kind": "underflow", "from": start, "factor": factor})
        s.twin = twin
        return s

    def bf16_inf(rng, w, p):
        step = rng.randrange(1, w["train"]["steps"] - 1)
        glob = rng.choice(param_globs(w))
        value = rng.choice(["inf", "nan", "-inf"])
        s = Scenario(w, f"{p}-b-bf16-inf-no-scaler", "bug", "bf16-autocast", "bf16_inf_no_scaler",
                     f"{value} in the grads of '{glob}' at step {step} under bf16 autocast, no scaler to skip it.",
                     E(verdict="nonfinite"), magnitude=None, placement=f"step {step} params {glob} value {value}")
        s.inject.append({"kind": "grad", "steps": [step], "value": value, "params": glob})
        s.twin = f"{p}-c-bf16-autocast"
        return s

    def bypass(rng, w, p):
        clip = "clip" in w["train"]
        s = Scenario(w, f"{p}-b-step-bypasses-scaler", "bug", "fp16-autocast", "step_bypasses_scaler",
                     "optimizer.step() instead of scaler.step(optimizer), update() kept.",
                     E(verdict="tracks") if clip else E(verdict="error", error="No inf checks were recorded prior to update."),
                     magnitude=None, placement="with update()" + (" (unscale_ before clipping records the inf checks)" if clip else ""))
        s.train["step_through_scaler"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def bypass_no_update(rng, w, p):
        s = Scenario(w, f"{p}-b-step-bypasses-scaler-no-update", "bug", "fp16-autocast",
                     "step_bypasses_scaler_no_update",
                     "optimizer.step() instead of scaler.step(optimizer) and no update(): the still-scaled grads "
                     "are applied.", E(verdict="nonfinite"), magnitude=None, placement="without update()")
        s.train["step_through_scaler"] = False
        s.train["call_update"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def update_never_called(rng, w, p):
        clip = "clip" in w["train"]
        err = ("unscale_() is being called after step()." if clip
               else "step() has already been called since the last update().")
        s = Scenario(w, f"{p}-b-update-never-called", "bug", "fp16-autocast", "update_never_called",
                     "scaler.update() never called: the scaler refuses its second step.",
                     E(verdict="error", error=err), magnitude=None, placement="")
        s.train["call_update"] = False
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def unscale_each(rng, w, p):
        s = Scenario(w, f"{p}-b-unscale-each-micro-batch", "bug", "fp16-autocast", "unscale_each_micro_batch",
                     f"scaler.unscale_() inside the accumulation loop over {w['train']['micro_batches']} "
                     f"micro-batches: PyTorch refuses the second unscale_.",
                     E(verdict="error", error="unscale_() has already been called on this optimizer since the last update()."),
                     magnitude=w["train"]["micro_batches"], placement="")
        s.train["unscale_each_micro_batch"] = True
        s.twin = f"{p}-c-fp16-autocast"
        return s

    def half_gradscaler(rng, w, p):
        s = Scenario(w, f"{p}-b-half-gradscaler", "bug", "fp16-pure-scaler", "half_gradscaler",
                     "model.half() with a GradScaler: the optimizer has no fp32 master weights and unscale_ refuses "
                     "fp16 grads.", E(verdict="error", error="Attempting to unscale FP16 gradients."),
                     magnitude=None, placement="")
        s.twin = f"{p}-c-fp16-master"
        return s

    def attention_clash(rng, w, p):
        s = Scenario(w, f"{p}-b-attention-dtype-clash", "bug", "fp32", "attention_dtype_clash",
                     "The attention query alone cast to fp16 before scaled_dot_product_attention: PyTorch refuses "
                     "the mixed dtypes.",
                     E(verdict="error", error="Expected query, key, and value to have the same dtype, but got "
                       "query.dtype: c10::Half key.dtype: float and value.dtype: float instead."),
                     magnitude=None, placement="")
        s.model["attention_query_dtype"] = "fp16"
        s.twin = None
        return s

    always = lambda w: True
    return [
        # signal-decided: weighted more
        ("zero_grad_forgotten_bf16", 3, "signal", always, zero_grad_bf16),
        ("zero_grad_forgotten_fp16_scaler", 2, "signal", always, zero_grad_fp16),
        ("loss_not_divided", 6, "signal", lambda w: w["train"]["micro_batches"] > 1, loss_not_divided),
        ("clip_before_unscale", 6, "signal", lambda w: "clip" in w["train"], clip_before_unscale),
        ("loss_not_scaled", 3, "signal", always, loss_not_scaled),
        ("static_scale_too_large", 3, "signal", always, static_too_large),
        ("bf16_pure", 3, "signal", always, bf16_pure),
        ("fp16_pure_adamw", 3, "signal", lambda w: w["optimizer"]["kind"] == "adamw", fp16_pure_adamw),
        ("underflow_no_scaler", 3, "signal", always, underflow),
        # decided by the run's status (error / non-finite): cheap sanity
        ("bf16_inf_no_scaler", 1, "status", always, bf16_inf),
        ("step_bypasses_scaler", 0.7, "status", always, bypass),
        ("step_bypasses_scaler_no_update", 0.7, "status", always, bypass_no_update),
        ("update_never_called", 0.7, "status", always, update_never_called),
        ("unscale_each_micro_batch", 0.7, "status", lambda w: w["train"]["micro_batches"] > 1, unscale_each),
        ("half_gradscaler", 0.7, "status", always, half_gradscaler),
        ("attention_dtype_clash", 0.7, "status", lambda w: w["model"]["kind"] == "gpt", attention_clash),
    ]


def bug_scenarios(rng, w, n):
    p = f"w{w['id']:03d}"
    pool = [c for c in bug_classes() if c[3](w)]
    out = []
    while pool and len(out) < n:
        i = rng.choices(range(len(pool)), weights=[c[1] for c in pool])[0]
        name, _, decided, _, make = pool.pop(i)
        s = make(rng, w, p)
        s.meta["decided_by"] = decided
        out.append(s)
    return out


# --------------------------------------------------------------------------------------------------------------
# YAML (flow style, only what the strict parser reads)

def yval(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        if "e" in r and "." not in r.split("e")[0]:
            r = r.replace("e", ".0e")
        return r
    if isinstance(v, str):
        if v in ("inf", "-inf", "nan") or any(ch in v for ch in ":{}[],*#&!|>'\"%@`") or v == "":
            return '"' + v.replace('"', '\\"') + '"'
        return v
    if isinstance(v, list):
        return "[" + ", ".join(yval(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {yval(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def scenario_yaml(s):
    w = s.w
    model = dict(w["model"], **s.model)
    train = {"steps": w["train"]["steps"]}
    if w["train"]["micro_batches"] > 1:
        train["micro_batches"] = w["train"]["micro_batches"]
    if "clip" in w["train"]:
        train["clip"] = {"max_norm": w["train"]["clip"], "unscale_first": s.train.pop("clip_unscale_first", True)}
    if w["train"].get("two_optimizers"):
        train["two_optimizers"] = True
        train["aux_loss_weight"] = w["train"]["aux_loss_weight"]
    for k, v in s.train.items():
        if k != "clip_unscale_first":
            train[k] = v
    lines = [
        f"# campaign: workload w{w['id']:03d}, {s.kind}, {s.label}" + (f", twin {s.twin}" if s.twin else ""),
        f"name: {s.name}",
        f"why: {yval(s.why)}",
        "device: cpu",
        f"seed: {w['seed']}",
        f"model: {yval(model)}",
        f"data: {yval(w['data'])}",
        f"optimizer: {yval(w['optimizer'])}",
        f"schedule: {yval(w['schedule'])}",
        f"train: {yval(train)}",
        f"strategy: {yval(s.strategy)}",
    ]
    if s.inject:
        lines.append("inject:")
        lines += [f"  - {yval(i)}" for i in s.inject]
    lines.append(f"expect: {yval(s.expect)}")
    return "\n".join(lines) + "\n"


def scenario_cost(s):
    """Estimated seconds: the full run, except raising bugs (they end at the first or second step)."""
    w = s.w
    if s.expect.get("verdict") == "error":
        return 0.5
    return 0.3 + w["train"]["steps"] * step_cost(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workloads", type=int, required=True)
    ap.add_argument("--bugs", type=int, default=5, help="planted bugs per workload (default 5)")
    ap.add_argument("--out", required=True, help="campaign directory (scenarios/, manifest.jsonl, ...)")
    ap.add_argument("--force", action="store_true", help="replace the scenarios of an existing campaign directory")
    ap.add_argument("--llama", type=float, default=0.0,
                    help="fraction of the transformer workloads drawn as Llama decoders (default 0: the draw of the "
                         "campaigns before the llama model, unchanged)")
    args = ap.parse_args()

    sdir = os.path.join(args.out, "scenarios")
    if os.path.exists(os.path.join(args.out, "manifest.jsonl")) and not args.force:
        old = json.load(open(os.path.join(args.out, "campaign.json")))
        if (old["seed"], old["workloads"], old["bugs"], old.get("llama", 0.0)) == (args.seed, args.workloads, args.bugs,
                                                                                  args.llama):
            print(f"{args.out}: campaign exists with the same arguments; kept")
            return 0
        sys.exit(f"{args.out}: holds another campaign (seed {old['seed']}, {old['workloads']} workloads); "
                 f"--force replaces it")
    os.makedirs(sdir, exist_ok=True)
    for f in os.listdir(sdir):
        if f.endswith(".yaml"):
            os.remove(os.path.join(sdir, f))

    rng = random.Random(args.seed)
    workloads, manifest = [], []
    for wid in range(args.workloads):
        for attempt in range(100):
            w = draw_workload(rng, wid, args.llama)
            # a long run only for a cheap model: shorten steps until the workload fits the cap
            while True:
                scen = correct_scenarios(rng, w) + bug_scenarios(rng, w, args.bugs)
                cost = 5 * (0.3 + w["train"]["steps"] * step_cost(w)) + sum(scenario_cost(s) for s in scen)
                if cost <= MAX_WORKLOAD_COST_S or w["train"]["steps"] <= 60:
                    break
                w["train"]["steps"] = max(60, int(w["train"]["steps"] * 0.7))
                if w["schedule"].get("warmup_steps", 0) >= w["train"]["steps"] // 4:
                    w["schedule"]["warmup_steps"] = w["train"]["steps"] // 5
            if cost <= MAX_WORKLOAD_COST_S:
                break
        w["est_cost_s"] = round(cost, 1)
        workloads.append(w)
        for s in scen:
            text = scenario_yaml(s)
            path = os.path.join(sdir, s.name + ".yaml")
            with open(path, "w") as f:
                f.write(text)
            strat = s.strategy if isinstance(s.strategy, str) else s.strategy["preset"]
            if isinstance(s.strategy, dict) and s.strategy.get("scaler", {}).get("kind") == "none":
                strat += "-noscaler"
            row = {"name": s.name, "file": os.path.relpath(path, args.out), "workload": f"w{wid:03d}",
                   "kind": s.kind, "strategy": strat,
                   "variant": s.label if s.kind == "correct" else None,
                   "bug_class": s.label if s.kind == "bug" else None,
                   "decided_by": s.meta.get("decided_by"),
                   "magnitude": s.meta.get("magnitude"), "placement": s.meta.get("placement"),
                   "expect": s.expect["verdict"], "twin": s.twin,
                   "model": w["model"]["kind"], "params": w["params"], "optimizer": w["optimizer"]["kind"],
                   "lr": w["optimizer"]["lr"], "steps": w["train"]["steps"],
                   "micro_batches": w["train"]["micro_batches"], "clip": w["train"].get("clip"),
                   "two_optimizers": bool(w["train"].get("two_optimizers")),
                   "est_cost_s": round(scenario_cost(s), 2)}
            manifest.append(row)

    with open(os.path.join(args.out, "manifest.jsonl"), "w") as f:
        for r in manifest:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(args.out, "workloads.jsonl"), "w") as f:
        for w in workloads:
            f.write(json.dumps(w) + "\n")
    n_correct = sum(r["kind"] == "correct" for r in manifest)
    n_bug = len(manifest) - n_correct
    total = sum(w["est_cost_s"] for w in workloads)
    info = {"seed": args.seed, "workloads": args.workloads, "bugs": args.bugs, "llama": args.llama,
            "scenarios": len(manifest),
            "correct": n_correct, "bug": n_bug, "est_core_seconds": round(total),
            "est_minutes_on_2_cores": round(total / 2 / 60, 1), "generator": "scenarios/campaign/generate.py"}
    with open(os.path.join(args.out, "campaign.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"{args.out}: {args.workloads} workloads, {n_correct} correct + {n_bug} bug scenarios; estimated "
          f"{info['est_minutes_on_2_cores']} min on 2 cores (5 FP32 trainings per workload for its reference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
