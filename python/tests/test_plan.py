"""ampcheck.plan: the plan file read with errors naming the file and the field, and a plain PyTorch loop recorded
under each plan by the Recorder alone (it applies the plan by hooks): the planned precision recorded, max_steps steps
then a clean end (SystemExit(0), the file complete), keep_fp32 modules running in FP32, and a planted overflow named
as the first non-finite module."""

import functools
import json
import os

import pytest
import torch

import hf_util
import plan_util
from ampcheck import Recorder
from ampcheck.plan import PlanError, load_plan


def loop(out, *, seed=1337, plant=None, observe=None, steps=20, scaler=None):
    """The plain loop of examples/sweep/plain_loop.py on the tiny GPT-2: (the exit code, the model). With `scaler`:
    nanoGPT's step (scale -> backward -> unscale_ -> clip -> step -> update), the scaler passed to the Recorder."""
    torch.manual_seed(seed)
    model = hf_util.model(seed)
    if plant:
        with torch.no_grad():
            model.get_submodule(plant).weight.mul_(1e6)
    seen = {}

    def note_dtype(name, module, args, out):  # (returns None: the output unchanged)
        seen.setdefault(name, (out[0] if isinstance(out, tuple) else out).dtype)

    for name in observe or []:
        model.get_submodule(name).register_forward_hook(functools.partial(note_dtype, name))
    # the input of the block after the kept module's: bfloat16 only if the kept module's output was cast back
    model.transformer.h[1].register_forward_pre_hook(
        lambda m, args: seen.setdefault("h.1 input", args[0].dtype) and None
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    # shuffled from the global RNG (as examples/sweep/plain_loop.py): the seed run's offset reseeds it
    data = iter(torch.utils.data.DataLoader(hf_util.Markov(512), batch_size=8, shuffle=True))
    with pytest.raises(SystemExit) as ended:
        with Recorder(os.path.join(out, "script-path.h5"), model, opt, scaler, overwrite=True) as rec:
            for _ in range(steps):
                batch = next(data)
                loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
                if scaler is None:
                    loss.backward()
                else:
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if scaler is None:
                    opt.step()
                else:
                    scaler.step(opt)
                    scaler.update()
                opt.zero_grad(set_to_none=True)
                rec.step(loss)
    return ended.value.code, model, seen


def test_a_bad_plan_names_the_file_and_the_field(tmp_path):
    good = json.load(open(plan_util.write_plan(str(tmp_path), "fp32", "fp32")))
    for field, value, says in [
        ("strategy", "fp12", "'strategy': expected one of fp32"),
        ("max_steps", -1, "'max_steps': expected a whole number from 0 to 10,000,000"),
        ("max_steps", 10**30, "'max_steps': expected a whole number from 0 to 10,000,000"),  # (issue 51)
        ("seed_offset", 10**30, "'seed_offset': expected a whole number from"),  # was torch's bare ValueError
        ("record", "relative.h5", "'record': expected an absolute path"),
        ("version", 2, "'version': expected 1"),
        ("keep_fp32", "lm_head", "'keep_fp32'"),
        ("perturbation", "ulp", "'perturbation'"),
        ("seed_offset", True, "'seed_offset'"),
    ]:
        bad = dict(good, **{field: value})
        path = tmp_path / f"bad-{field}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(PlanError, match=says) as e:
            load_plan(str(path))
        assert str(path) in str(e.value) and "HINT" in str(e.value)
    missing = {k: v for k, v in good.items() if k != "workload"}
    (tmp_path / "missing.json").write_text(json.dumps(missing))
    with pytest.raises(PlanError, match="'workload'.*missing"):
        load_plan(str(tmp_path / "missing.json"))
    (tmp_path / "notjson.json").write_text("{")
    with pytest.raises(PlanError, match="not JSON"):
        load_plan(str(tmp_path / "notjson.json"))


@pytest.mark.parametrize("run,strategy,fields", plan_util.RUNS, ids=[r[0] for r in plan_util.RUNS])
def test_plain_loop_records_the_planned_precision(tmp_path, monkeypatch, run, strategy, fields):
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, run, strategy, **fields))
    code, _, _ = loop(d)
    assert code == 0  # ended cleanly at max_steps
    assert not os.path.exists(os.path.join(d, "script-path.h5"))  # the plan's path wins
    attrs, cols = plan_util.check_run(d, run, strategy, fields)
    if strategy == "fp16-autocast-scaler":  # the backward-hook scaler: the scale recorded, the grads unscaled
        assert cols["loss_scale"][0] == 2.0**16 and 0.1 < cols["grad_norm"][0] < 10, cols
    if run == "fp32-seed":  # the offset seed changes the data order: another first loss than the fp32 run's
        monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp32", "fp32"))
        loop(d)
        _, base = plan_util.read(os.path.join(d, "runs", "fp32.h5"))
        assert base["loss"][0] != cols["loss"][0]


@pytest.mark.parametrize("enabled", [False, True], ids=["disabled", "enabled"])
def test_the_scripts_own_grad_scaler_under_the_fp16_plan(tmp_path, monkeypatch, enabled):
    """nanoGPT makes `GradScaler(enabled=(dtype == 'float16'))` and passes every step through it: a disabled one (its
    FP32 / bf16 configs) is left a pass-through and the hooks scale; an enabled one is the run's scaler."""
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp16-autocast-scaler", "fp16-autocast-scaler"))
    scaler = torch.amp.GradScaler("cpu", enabled=enabled)
    code, _, _ = loop(d, scaler=scaler)
    assert code == 0
    _, cols = plan_util.check_run(d, "fp16-autocast-scaler", "fp16-autocast-scaler", {})
    assert cols["loss_scale"][0] == 2.0**16, cols["loss_scale"]  # the scale the backward used
    assert 0.1 < cols["grad_norm"][0] < 10, cols["grad_norm"]  # the grads recorded unscaled
    assert scaler.is_enabled() == enabled  # a disabled one stays disabled (a pass-through), an enabled one is used


def test_the_scripts_enabled_grad_scaler_is_switched_off_under_the_fp32_plan(tmp_path, monkeypatch):
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp32", "fp32"))
    scaler = torch.amp.GradScaler("cpu")
    assert loop(d, scaler=scaler)[0] == 0
    attrs, cols = plan_util.read(os.path.join(d, "runs", "fp32.h5"))
    assert (attrs["autocast_dtype"], attrs["param_dtype"], attrs["grad_scaler"]) == ("none", "float32", "disabled")
    assert "loss_scale" not in cols and not scaler.is_enabled()


def test_pure_bf16_with_the_loss_computed_outside_the_model(tmp_path, monkeypatch):
    """A plain loop's loss against an fp32 target (mse_loss) under pure bf16: the model's output leaves it as float32,
    so the backward does not fail on mixed dtypes ("Found dtype Float but expected BFloat16") — the plan's doing."""
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "pure-bf16", "pure-bf16"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 8)
    with pytest.raises(SystemExit) as ended:
        with Recorder(os.path.join(d, "unused.h5"), model, opt) as rec:
            for _ in range(plan_util.STEPS + 1):
                loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
                loss.backward()
                opt.step()
                opt.zero_grad()
                rec.step(loss)
    assert ended.value.code == 0
    attrs, cols = plan_util.read(os.path.join(d, "runs", "pure-bf16.h5"))
    assert attrs["status"] == "completed" and attrs["param_dtype"] == "bfloat16", attrs
    assert len(cols["loss"]) == plan_util.STEPS


@pytest.mark.parametrize("strategy", ["fp16-autocast-scaler", "pure-bf16"])
def test_keep_fp32_runs_the_named_module_in_fp32(tmp_path, monkeypatch, strategy):
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "probe", strategy, keep_fp32=["transformer.h.0.mlp"]))
    kept, other = "transformer.h.0.mlp.c_fc", "transformer.h.1.mlp.c_fc"
    _, model, seen = loop(d, observe=[kept, other])
    half = torch.float16 if strategy.startswith("fp16") else torch.bfloat16
    assert seen[kept] == torch.float32 and seen[other] == half, seen
    if strategy == "pure-bf16":  # its parameters fp32, its output cast back to the model's dtype
        assert model.get_submodule(kept).weight.dtype == torch.float32
        assert model.get_submodule(other).weight.dtype == torch.bfloat16
        assert seen["h.1 input"] == torch.bfloat16, seen
    attrs, _ = plan_util.read(os.path.join(d, "runs", "probe.h5"))
    assert attrs["status"] == "completed" and attrs["plan_applied"] == "yes"


def test_a_planted_overflow_names_its_module(tmp_path, monkeypatch):
    d = str(tmp_path)
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp16", "fp16-autocast-scaler"))
    loop(d, plant="transformer.h.0.mlp.c_fc")
    attrs, cols = plan_util.read(os.path.join(d, "runs", "fp16.h5"))
    assert attrs["first_nonfinite_module"] == "transformer.h.0.mlp.c_fc", attrs
    assert (attrs["first_nonfinite_step"], attrs["first_nonfinite_pass"]) == ("0", "forward")
    # the first operation, traced at the module's next forward: autocast's cast of the weight (x 1e6: its largest
    # element no longer fits in fp16) — before the matmul
    op = attrs["first_nonfinite_op"]
    assert op.startswith("aten::_to_copy -> float16 (inputs float32, largest |input| "), op
    assert "above float16's largest 65504" in op and "in transformer.h.0.mlp.c_fc (forward, traced at step" in op, op
    assert "already non-finite" not in op, op
    assert cols["skipped"].all()  # the scaler skipped every step (the forward overflows each time)
    # the sweep's timing re-runs (time-*) carry no watch: the same plant, no non-finite module recorded
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "time-fp16-1", "fp16-autocast-scaler"))
    loop(d, plant="transformer.h.0.mlp.c_fc")
    attrs, cols = plan_util.read(os.path.join(d, "runs", "time-fp16-1.h5"))
    assert "first_nonfinite_module" not in attrs and cols["skipped"].all(), attrs
    # the same plant in FP32 overflows nothing: no non-finite module recorded
    monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, "fp32", "fp32"))
    loop(d, plant="transformer.h.0.mlp.c_fc")
    attrs, _ = plan_util.read(os.path.join(d, "runs", "fp32.h5"))
    assert "first_nonfinite_module" not in attrs


def test_a_plan_that_cannot_be_applied_is_recorded_as_refused(tmp_path, monkeypatch):
    d = str(tmp_path)
    for run, strategy, fields, why in [
        ("fp8", "fp8", {}, "fp8 needs torchao"),
        ("master", "fp16-master-weights", {}, "no fp32 master copy"),
        ("probe", "bf16-autocast", {"keep_fp32": ["no.such"]}, "'no.such'"),
    ]:
        pytest.importorskip("torch")
        if run == "fp8":
            try:
                import torchao.float8  # noqa: F401

                continue  # installed: not refused for that reason
            except ImportError:
                pass
        monkeypatch.setenv("AMPCHECK_PLAN", plan_util.write_plan(d, run, strategy, **fields))
        code, _, _ = loop(d)
        assert code != 0 and why in str(code), code
        attrs, _ = plan_util.read(os.path.join(d, "runs", run + ".h5"))
        assert attrs["status"] == "error" and attrs["plan_applied"].startswith("refused: ") and why in attrs["error"]
        assert attrs["device"] == "cpu"


def test_skip_first_step_outside_a_plan(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w0 = model.weight.detach().clone()
    with Recorder(str(tmp_path / "skip.h5"), model, opt, skip_first_step=True) as rec:
        for step in range(3):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            if step == 0:
                assert torch.equal(model.weight, w0)  # not taken
            opt.zero_grad()
            rec.step(torch.tensor(1.0))
    attrs, cols = plan_util.read(str(tmp_path / "skip.h5"))
    assert attrs["perturbation"] == "skip" and list(cols["skipped"]) == [1, 0, 0]


class _LossInside(torch.nn.Module):
    """A model that computes its loss inside forward from float32 logits and returns both (as transformers does given
    labels, with logits upcast): the plan's scaler must scale the grad that reaches the logits once, not twice."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(self.body(x)).float()
        return {"loss": torch.nn.functional.cross_entropy(logits, y), "logits": logits}


@pytest.mark.parametrize("keep", [[], ["head"], [""]])
def test_the_plans_scaler_scales_a_loss_computed_inside_the_model_once(keep):
    from ampcheck.plan import Plan
    from ampcheck.plan_hooks import BackwardHookScaler, PlanHooks

    def grads(strategy: str) -> tuple[list[torch.Tensor], bool]:
        torch.manual_seed(0)
        model = _LossInside()
        x, y = torch.randn(32, 8), torch.randint(0, 5, (32,))
        plan = Plan("p.json", 1, "probe", strategy, "", 0, 0, "", keep if strategy != "fp32" else [], "w")
        scaler = BackwardHookScaler(torch.device("cpu")) if strategy != "fp32" else None
        hooks = PlanHooks(plan, model, None, scaler=scaler)
        model(x, y)["loss"].backward()
        hooks.remove()
        return [p.grad.float() for p in model.parameters()], torch.is_autocast_enabled("cpu")

    ref, _ = grads("fp32")
    got, autocast_after = grads("fp16-autocast-scaler")
    assert not autocast_after, "the plan left autocast on after the model's forward"
    # fp16 compute (bf16 on CPU autocast: the device's autocast dtype) rounds at ~1e-2 relative; a double scaling is a
    # factor 65536 off
    for r, g in zip(ref, got):
        assert torch.allclose(g, r, rtol=5e-2, atol=1e-3), (keep, (g.norm() / r.norm()).item())
