"""Tests of the recorder (python/src/ampcheck/recorder.py, imported through python/src/ampcheck_recorder.py) against values
computed by hand in the same loop (Python torch 2.11, CPU).

Tolerances: the recorder reduces in float64 over per-tensor float32 norms (squared and summed in float64), the hand
computation over one concatenated float64 vector; they agree to 1e-6 relative (float32 rounding of each per-tensor
norm, ~6e-8, with margin). Element fractions are counts over the same grads and compare exactly.
"""

import copy
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import warnings

import h5py
import torch

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")  # python/src
sys.path.insert(0, SRC_DIR)
import ampcheck  # noqa: E402
from ampcheck.recorder import RecorderKeywords, RecorderOptions  # noqa: E402
from ampcheck_recorder import Recorder, nudge_ulp  # noqa: E402

REL = 1e-6


def read_h5(path):
    with h5py.File(path) as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()}
        return attrs, {k: f["steps"][k][:] for k in f["steps"]}


def model_and_data(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    return model, x, y


def grads_of(model):
    """The model's grads as one float64 vector (the hand computation)."""
    return torch.cat([p.grad.reshape(-1).double() for p in model.parameters()])


def recorder_warnings(caught):
    return [w for w in caught if "ampcheck_recorder" in str(w.message)]


class RecorderTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "run.h5")

    def tearDown(self):
        self.dir.cleanup()

    def test_columns_are_what_the_format_defines(self):
        """GradScaler on fp32 params with SGD: a planted inf at step 2 is a skip that halves the scale; the grad norm is
        the true (unscaled) norm before clipping, the update norm the params' change, lr the step's lr."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        expected = []
        with Recorder(self.path, model, opt, scaler, attributes={"strategy": "test"}, probe_every=1) as rec:
            for step in range(5):
                for g in opt.param_groups:
                    g["lr"] = 0.1 / (step + 1)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                if step == 2:
                    model[0].weight.grad[0, 0] = math.inf
                grads = torch.cat([p.grad.reshape(-1).double() for p in model.parameters()])
                scale = scaler.get_scale()
                before = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
                rec.after_backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # clipping must not change grad_norm
                scaler.step(opt)
                scaler.update()
                after = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
                expected.append(
                    dict(
                        loss=loss.item(),
                        grad_norm=(grads.norm() / scale).item(),
                        loss_scale=scale,
                        update_norm=(after - before).norm().item(),
                        param_norm=after.norm().item(),
                        frac_zero_grad=(grads == 0).double().mean().item(),
                        frac_nonfinite_grad=(~grads.isfinite()).double().mean().item(),
                        lr=0.1 / (step + 1),
                        skipped=float(step == 2),
                    )
                )
                rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["format"], "ampcheck-trajectory")
        self.assertEqual(attrs["format_version"], "1")
        self.assertEqual(attrs["status"], "completed")
        self.assertEqual(attrs["strategy"], "test")
        self.assertEqual(attrs["model_parameters"], str(sum(p.numel() for p in model.parameters())))
        self.assertEqual(attrs["grad_probe"], "after_backward")  # it takes precedence over the grad hooks
        self.assertEqual(attrs["grad_scaler"], "enabled")
        for s, e in enumerate(expected):
            for col, want in e.items():
                got = steps[col][s]
                if math.isinf(want) or math.isnan(want):
                    self.assertEqual(math.isinf(got), math.isinf(want), (s, col))
                elif col == "grad_norm" and s == 2:
                    self.assertTrue(math.isinf(got), (s, col, got))
                else:
                    self.assertLessEqual(abs(got - want), REL * max(abs(want), 1e-12), (s, col, got, want))
        self.assertEqual(steps["update_norm"][2], 0.0)  # the skipped step moved nothing
        self.assertEqual(steps["loss_scale"][3], steps["loss_scale"][2] / 2)  # the backoff
        self.assertGreater(steps["frac_nonfinite_grad"][2], 0)
        self.assertTrue(all(t > 0 for t in steps["step_time_ms"]))

    def test_without_after_backward_grads_are_read_by_backward_hooks(self):
        """One call per step: the grad columns are of the grads as backward left them, divided by the scale. (Before the
        grad hooks this test was ..._read_at_step: the grads scaler.step had unscaled — the same norm here, as nothing
        clips; the clipping case is test_grad_norm_is_before_clipping_without_after_backward.)"""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
        with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            true_norm = (torch.cat([p.grad.reshape(-1).double() for p in model.parameters()]).norm() / 256.0).item()
            scaler.step(opt)
            scaler.update()
            rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_probe"], "backward-hooks")
        self.assertLessEqual(abs(steps["grad_norm"][0] - true_norm), REL * true_norm)
        self.assertEqual(steps["loss_scale"][0], 256.0)
        self.assertEqual(steps["skipped"][0], 0.0)

    # -- where the grads are read: the backward hooks ---------------------------------------------------------------

    def test_step_after_zero_grad_set_to_none_still_records_the_grads(self):
        """nanoGPT's order: backward, clip, step, zero_grad(set_to_none=True), then rec.step() next to the logging.
        Every .grad is None at step(); the hooks read them at backward, so grad_norm is the pre-clip norm, not NaN."""
        model, x, y = model_and_data()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        expected = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Recorder(self.path, model, opt, probe_every=1) as rec:
                for _ in range(3):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    grads = grads_of(model)
                    expected.append((grads.norm().item(), (grads == 0).double().mean().item()))
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    self.assertTrue(all(p.grad is None for p in model.parameters()))
                    rec.step(loss)
        self.assertEqual(recorder_warnings(caught), [])
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_probe"], "backward-hooks")
        self.assertEqual(attrs["steps_without_grads"], "0")
        for s, (norm, frac_zero) in enumerate(expected):
            self.assertLessEqual(abs(steps["grad_norm"][s] - norm), REL * norm, s)
            self.assertEqual(steps["frac_zero_grad"][s], frac_zero, s)
            self.assertEqual(steps["frac_nonfinite_grad"][s], 0.0, s)
            self.assertGreater(steps["update_norm"][s], 0.0, s)

    def test_grad_norm_is_before_clipping_without_after_backward(self):
        """clip_grad_norm_(max_norm=0.01) shrinks the grads ~100x in place before step(); the recorded norm is the
        unclipped one (a bug that grows the grads must not be hidden by the clip)."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Recorder(self.path, model, opt, probe_every=1) as rec:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            unclipped = grads_of(model).norm().item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            clipped = grads_of(model).norm().item()
            opt.step()
            rec.step(loss)
        _, steps = read_h5(self.path)
        self.assertGreater(unclipped, 10 * clipped)  # the clip did bind
        self.assertLessEqual(abs(steps["grad_norm"][0] - unclipped), REL * unclipped)

    def test_gradient_accumulation_records_the_accumulated_grads(self):
        """Two micro-batches, the loss NOT divided by 2 (the accumulation bug): the recorded norm is that of the
        accumulated grads the optimizer steps with (divided by the GradScaler's scale), not the last micro-batch's;
        clipping at 1.0 afterwards does not change it."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
        expected = []
        with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
            for _ in range(2):
                for half in (slice(0, 16), slice(16, 32)):
                    loss = torch.nn.functional.mse_loss(model(x[half]), y[half])  # the bug: not / 2
                    scaler.scale(loss).backward()
                    if half.start == 0:
                        first = grads_of(model).norm().item() / 512.0
                accumulated = grads_of(model).norm().item() / 512.0
                expected.append((first, accumulated))
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_probe"], "backward-hooks")
        for s, (first, accumulated) in enumerate(expected):
            self.assertLessEqual(abs(steps["grad_norm"][s] - accumulated), REL * accumulated, s)
            self.assertGreater(abs(accumulated - first), 0.1 * accumulated, s)  # the first micro-batch's differs
            self.assertEqual(steps["loss_scale"][s], 512.0, s)

    def test_a_varying_number_of_micro_batches(self):
        """A hook measures from the previous step's number of backward passes on (earlier micro-batches' grads are
        replaced anyway). Micro-batches per step 2, 1, 3, 2, 2: step 1 (fewer, grads untouched until step()) is read at
        step(), exactly; step 2 (more) is measured at each of its last backward passes; step 3 (fewer, clipped and
        zeroed before step()) cannot be read: NaN, counted, one warning; step 4 is measured again."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        expected = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Recorder(self.path, model, opt, probe_every=1) as rec:
                for step, micro in enumerate((2, 1, 3, 2, 2)):
                    for k in range(micro):
                        loss = torch.nn.functional.mse_loss(model(x[8 * k : 8 * k + 8]), y[8 * k : 8 * k + 8])
                        loss.backward()
                    expected.append(grads_of(model).norm().item())
                    if step == 3:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                        rec.step(loss)
                    else:
                        opt.step()
                        rec.step(loss)
                        opt.zero_grad(set_to_none=True)
        found = recorder_warnings(caught)
        self.assertEqual(len(found), 1)
        self.assertRegex(str(found[0].message), r"^ampcheck_recorder: step 3: this step ran fewer backward passes")
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_probe"], "backward-hooks")
        self.assertEqual(attrs["steps_without_grads"], "1")
        for s, norm in enumerate(expected):
            if s == 3:
                self.assertTrue(math.isnan(steps["grad_norm"][s]))
            else:
                self.assertLessEqual(abs(steps["grad_norm"][s] - norm), REL * norm, s)

    def test_a_skipped_scaler_step_is_read_before_unscale_and_clip(self):
        """An inf in one grad element (planted by a tensor hook, i.e. during backward) at step 1: GradScaler skips the
        step, and the clip multiplies the grads by 0 (inf * 0 = NaN, the rest 0) before step() — the HF Trainer's
        order. The hooks read the grads before: one non-finite element, the zero fraction as backward left it."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        n = sum(p.numel() for p in model.parameters())
        with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
            for step in range(3):
                handle = None
                if step == 1:

                    def plant(g):
                        g = g.clone()
                        g[0, 0] = math.inf
                        return g

                    handle = model[0].weight.register_hook(plant)
                loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                if handle is not None:
                    handle.remove()
                    frac_zero = (grads_of(model) == 0).double().mean().item()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                if step == 1:
                    after_clip = grads_of(model)
                    self.assertGreater(((after_clip == 0) | after_clip.isnan()).double().mean().item(), 0.99)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_scaler"], "enabled")
        self.assertEqual(list(steps["skipped"]), [0.0, 1.0, 0.0])
        self.assertEqual(steps["frac_nonfinite_grad"][1], 1 / n)  # exactly the planted element
        self.assertEqual(steps["frac_zero_grad"][1], frac_zero)
        self.assertLess(frac_zero, 0.5)
        self.assertTrue(math.isinf(steps["grad_norm"][1]))
        self.assertEqual(steps["update_norm"][1], 0.0)
        self.assertEqual(list(steps["loss_scale"]), [1024.0, 1024.0, 512.0])  # the backoff after the skip

    def test_loss_scale_when_step_comes_before_update(self):
        """rec.step() between scaler.step() and scaler.update(): loss_scale is still the scale each step's backward used
        (taken at its first grad hook), through the backoff after a skipped step."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        used = []
        with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
            for step in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                used.append(scaler.get_scale())
                if step == 1:
                    model[2].bias.grad.fill_(math.inf)
                scaler.step(opt)
                rec.step(loss)
                scaler.update()
        _, steps = read_h5(self.path)
        self.assertEqual(used, [1024.0, 1024.0, 512.0])
        self.assertEqual(list(steps["loss_scale"]), used)
        self.assertEqual(list(steps["skipped"]), [0.0, 1.0, 0.0])

    def test_grads_set_without_backward_are_read_at_step(self):
        """A loop that sets .grad itself (no backward, no hook fires) is read at step(); the attribute names both ways
        the run's grads were read, the most common first."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        expected = []
        with Recorder(self.path, model, opt, probe_every=1) as rec:
            for step in range(3):
                opt.zero_grad(set_to_none=True)
                if step == 0:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                else:
                    for p in model.parameters():
                        p.grad = torch.randn_like(p)
                expected.append(grads_of(model).norm().item())
                opt.step()
                rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["grad_probe"], "at_step,backward-hooks")
        for s, norm in enumerate(expected):
            self.assertLessEqual(abs(steps["grad_norm"][s] - norm), REL * norm, s)

    def test_sparse_embedding_grads_count_their_implicit_zeros(self):
        """nn.Embedding(sparse=True): a sparse grad's norm and fractions are those of its dense form (the rows not
        looked up are zeros)."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(20, 4, sparse=True), torch.nn.Flatten(), torch.nn.Linear(12, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        tokens, y = torch.randint(0, 20, (8, 3)), torch.randn(8, 1)
        with Recorder(self.path, model, opt, probe_every=1) as rec:
            loss = torch.nn.functional.mse_loss(model(tokens), y)
            loss.backward()
            self.assertTrue(model[0].weight.grad.is_sparse)
            dense = torch.cat(
                [(p.grad.to_dense() if p.grad.is_sparse else p.grad).reshape(-1).double() for p in model.parameters()]
            )
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec.step(loss)
        _, steps = read_h5(self.path)
        self.assertLessEqual(abs(steps["grad_norm"][0] - dense.norm().item()), REL * dense.norm().item())
        self.assertEqual(steps["frac_zero_grad"][0], (dense == 0).double().mean().item())
        self.assertGreater(steps["frac_zero_grad"][0], 0.2)  # most embedding rows were not looked up
        self.assertEqual(steps["frac_subnormal_grad"][0], 0.0)
        self.assertEqual(steps["frac_nonfinite_grad"][0], 0.0)

    def test_no_gradients_warns_once_and_counts_the_steps(self):
        """The recorder is given a copy of the trained model (no backward ever reaches its parameters): every probe
        step's grad columns are NaN, the first warns, steps_without_grads counts them; the copy never ran forward."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Recorder(self.path, copy.deepcopy(model), probe_every=1) as rec:
                for _ in range(3):
                    opt.zero_grad(set_to_none=True)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    rec.step(loss)
        found = recorder_warnings(caught)
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0].category, UserWarning)
        self.assertRegex(str(found[0].message), r"^ampcheck_recorder: step 0: no gradients seen at step\(\)")
        self.assertIn("`ampcheck judge` will not judge them", str(found[0].message))
        self.assertEqual(found[0].filename, os.path.abspath(__file__))  # points at the loop's rec.step() line
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["steps_without_grads"], "3")
        self.assertEqual(attrs["grad_probe"], "none")
        self.assertEqual(attrs["autocast_dtype"], "unknown")
        self.assertTrue(all(math.isnan(v) for v in steps["grad_norm"]))
        self.assertTrue(all(math.isnan(v) for v in steps["frac_zero_grad"]))
        model.zero_grad(set_to_none=True)
        with self.assertWarnsRegex(UserWarning, "step 0: no gradients seen"):  # step() with every .grad None
            with Recorder(os.path.join(self.dir.name, "again.h5"), model) as rec:
                rec.step(1.0)

    # -- the precision in effect, noise-run labels -------------------------------------------------------------------

    def _one_step(self, path, model, x, y, scaler=None, autocast=None, eval_first=False):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Recorder(path, model, opt, scaler, probe_every=1) as rec:
            if eval_first:  # an eval forward, no grad, no autocast: the training forward decides
                with torch.no_grad():
                    model(x)
            with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            rec.step(loss)
        return read_h5(path)[0]

    def test_precision_in_effect_is_recorded(self):
        """param_dtype, autocast_dtype, grad_scaler for: plain fp32; CPU bf16 autocast (after an eval forward without
        it); fp16 autocast with a disabled GradScaler; fp16 asked for but neither autocast nor scaler in effect (the HF
        Trainer's fp16=True on a CPU); parameters of two dtypes."""
        model, x, y = model_and_data()
        cases = [
            (dict(), ("float32", "none", "none")),
            (dict(autocast=torch.bfloat16, eval_first=True), ("float32", "bfloat16", "none")),
            (
                dict(autocast=torch.float16, scaler=torch.amp.GradScaler("cpu", enabled=False)),
                ("float32", "float16", "disabled"),
            ),
            (dict(scaler=torch.amp.GradScaler("cpu", enabled=False)), ("float32", "none", "disabled")),
        ]
        for i, (kw, (param_dtype, autocast_dtype, grad_scaler)) in enumerate(cases):
            attrs = self._one_step(os.path.join(self.dir.name, f"p{i}.h5"), model, x, y, **kw)
            self.assertEqual(
                (attrs["param_dtype"], attrs["autocast_dtype"], attrs["grad_scaler"]),
                (param_dtype, autocast_dtype, grad_scaler),
                kw,
            )
            self.assertNotIn("perturbation", attrs)  # only when given
            self.assertEqual(attrs["grad_probe"], "backward-hooks")
        model[2].half()  # parameters of two dtypes (no training step needed: the dtypes are read at step())
        with Recorder(self.path, model, probe_every=0, attributes={"param_dtype": "float32"}) as rec:
            rec.step(0.0)
        attrs, _ = read_h5(self.path)
        self.assertEqual(attrs["param_dtype"], "float16,float32")  # measured, over the caller's attribute
        self.assertEqual(attrs["autocast_dtype"], "unknown")
        self.assertNotIn("grad_probe", attrs)  # probe_every=0: no grads read
        self.assertEqual(attrs["grad_scaler"], "none")

    def test_perturbation_label_and_nudge_ulp(self):
        with Recorder(self.path, perturbation="seed") as rec:
            rec.step(1.0)
        self.assertEqual(read_h5(self.path)[0]["perturbation"], "seed")
        for bad in (
            dict(perturbation="ulp+1"),
            dict(attributes={"perturbation": "data"}),
            dict(perturbation="ulp", attributes={"perturbation": "seed"}),
        ):
            with self.assertRaisesRegex(ValueError, "perturbation"):
                Recorder(os.path.join(self.dir.name, "bad.h5"), **bad)
        with self.assertRaisesRegex(ValueError, "'none' .*'ulp', 'seed', 'order'"):
            Recorder(os.path.join(self.dir.name, "bad.h5"), perturbation="ulp+1")
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "bad.h5")))

        model, _, _ = model_and_data()
        model[0].bias.data[0] = 0.0  # one ulp up from 0 is the smallest subnormal
        before = [p.detach().clone() for p in model.parameters()]
        nudge_ulp(model)
        for b, p in zip(before, model.parameters()):
            self.assertTrue(torch.equal(p.detach(), torch.nextafter(b, torch.full_like(b, math.inf))))
            self.assertTrue(bool((p.detach() > b).all()))
            self.assertTrue(p.requires_grad and p.is_leaf and p.grad is None)
        self.assertEqual(model[0].bias[0].item(), torch.finfo(torch.float32).smallest_normal * 2**-23)
        nudge_ulp(model, direction=-1)  # one ulp down again: exactly the original weights
        for b, p in zip(before, model.parameters()):
            self.assertTrue(torch.equal(p.detach(), b))
        with self.assertRaisesRegex(ValueError, "direction"):
            nudge_ulp(model, direction=2)

    def test_fused_adamw_skip_is_seen_through_found_inf(self):
        """A fused optimizer: GradScaler calls step() with found_inf and the kernel skips; the recorder reads found_inf."""
        model, x, y = model_and_data()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
            for step in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                if step == 1:
                    model[2].bias.grad.fill_(math.nan)
                scaler.step(opt)
                scaler.update()
                rec.step(loss)
        _, steps = read_h5(self.path)
        self.assertEqual(list(steps["skipped"]), [0.0, 1.0, 0.0])
        self.assertEqual(steps["update_norm"][1], 0.0)
        self.assertGreater(steps["update_norm"][2], 0.0)

    def test_an_exception_is_recorded_as_an_error_run_and_raised(self):
        model, x, y = model_and_data()
        model.half()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        with self.assertRaisesRegex(ValueError, "Attempting to unscale FP16 gradients."):
            with Recorder(self.path, model, opt, scaler, probe_every=1) as rec:
                for _ in range(3):
                    opt.zero_grad()
                    loss = torch.nn.functional.mse_loss(model(x.half()).float(), y)
                    scaler.scale(loss).backward()
                    scaler.step(opt)  # PyTorch 2.11 raises here: fp16 grads have no fp32 master copy
                    scaler.update()
                    rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["status"], "error")
        self.assertEqual(attrs["error"], "Attempting to unscale FP16 gradients.")
        self.assertEqual(len(steps["loss"]), 0)
        self.assertEqual(os.listdir(self.dir.name), ["run.h5"])  # no temporary file left

    def test_an_uncaught_exception_without_with_is_written_at_exit(self):
        script = textwrap.dedent(f"""
            import sys, torch
            sys.path.insert(0, {SRC_DIR!r})
            from ampcheck_recorder import Recorder
            rec = Recorder({self.path!r})
            rec.step(torch.tensor(2.0))
            rec.step(torch.tensor(1.5))
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        """)
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("illegal memory access", r.stderr)  # the traceback is still printed
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["status"], "error")
        self.assertIn("illegal memory access", attrs["error"])
        self.assertEqual(list(steps["loss"]), [2.0, 1.5])
        self.assertEqual(sorted(steps), ["loss", "step_time_ms"])  # only what was measured

    def test_refuses_to_overwrite_and_bad_paths(self):
        open(self.path, "w").write("precious")
        with self.assertRaisesRegex(FileExistsError, "refusing to overwrite"):
            Recorder(self.path)
        self.assertEqual(open(self.path).read(), "precious")
        with self.assertRaisesRegex(ValueError, r"must end in \.h5, \.hdf5 .* or \.jsonl"):
            Recorder(os.path.join(self.dir.name, "run.txt"))
        with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
            Recorder(os.path.join(self.dir.name, "missing", "run.h5"))

    def test_json_lines_spell_nan_as_null(self):
        path = os.path.join(self.dir.name, "run.jsonl")
        with Recorder(path, probe_every=2, flush_every=1) as rec:
            rec.step(torch.tensor(3.0))
            rec.step(torch.tensor(float("nan")))
        lines = [json.loads(line) for line in open(path)]
        self.assertEqual(lines[0]["format"], "ampcheck-trajectory")
        self.assertEqual(lines[0]["format_version"], 1)
        self.assertEqual(lines[0]["attributes"]["status"], "completed")
        self.assertEqual([(d["step"], d["loss"]) for d in lines[1:]], [(0, 3.0), (1, None)])


class RecorderOptionsTest(unittest.TestCase):
    """Recorder(..., options=RecorderOptions(...)) and Recorder(..., **keywords) are one recording; each option is
    checked in RecorderOptions, its error naming the field."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def _train(self, name, **recorder_arguments):
        """Four SGD steps with a GradScaler, seeded the same every time: the file's attributes (less the date) and
        columns (less the wall-clock step_time_ms), and the Recorder's options."""
        model, x, y = model_and_data(seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
        path = os.path.join(self.dir.name, name)
        with Recorder(path, model, opt, scaler, **recorder_arguments) as rec:
            for _ in range(4):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                rec.step(loss)
        attrs, steps = read_h5(path)
        del attrs["date"], steps["step_time_ms"]
        return attrs, {k: v.tolist() for k, v in steps.items()}, rec.options

    def test_the_former_option_attributes_still_read(self):
        """rec.probe_every, rec.flush_every and rec.stop_raises (attributes before the options object) read the
        options; assigning one is refused rather than silently ignored."""
        model, _, _ = model_and_data(seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with Recorder(os.path.join(self.dir.name, "a.h5"), model, opt, probe_every=3, flush_every=7) as rec:
            self.assertEqual((rec.probe_every, rec.flush_every, rec.stop_raises), (3, 7, rec.options.stop_raises))
            with self.assertRaises(AttributeError):
                rec.probe_every = 5

    def test_options_object_records_what_the_keywords_record(self):
        keywords = dict(
            attributes={"run_key": "options-v1", "strategy": "fp32-scaled"},
            probe_every=1,
            flush_every=2,
            perturbation="seed",
            snapshot_every=3,
            track_nonfinite=True,
        )
        by_keywords = self._train("keywords.h5", **keywords)
        by_options = self._train("options.h5", options=RecorderOptions(**keywords))
        self.assertEqual(by_options[0], by_keywords[0])  # attributes, every one
        self.assertEqual(by_options[1], by_keywords[1])  # columns, bit for bit (same seed, same CPU loop)
        self.assertEqual(by_options[2], by_keywords[2])  # Recorder.options
        self.assertEqual(by_keywords[0]["perturbation"], "seed")
        self.assertIn("grad_norm", by_keywords[1])
        self.assertIs(ampcheck.RecorderOptions, RecorderOptions)  # the package exports it
        self.assertIn("RecorderOptions", ampcheck.__all__)

    def test_options_with_a_loose_keyword_is_refused_naming_both(self):
        path = os.path.join(self.dir.name, "both.h5")
        with self.assertRaisesRegex(TypeError, r"options=.*probe_every=.*either as options= or as keywords"):
            Recorder(path, options=RecorderOptions(probe_every=1), probe_every=2)
        with self.assertRaisesRegex(TypeError, "options=.*expected a RecorderOptions"):
            Recorder(path, options={"probe_every": 1})
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'probe_evry'"):
            Recorder(path, probe_evry=1)
        self.assertFalse(os.path.exists(path))

    def test_a_bad_option_is_refused_naming_the_field(self):
        path = os.path.join(self.dir.name, "bad.h5")
        for field, value in (
            ("probe_every", -1),
            ("flush_every", 0),
            ("snapshot_every", -2),
            ("probe_every", 2.5),
            ("flush_every", True),
        ):
            with self.subTest(field=field, value=value):
                with self.assertRaisesRegex(ValueError, rf"^{field}={value!r}: must be a whole number >= "):
                    RecorderOptions(**{field: value})
                with self.assertRaisesRegex(ValueError, rf"^{field}={value!r}: "):
                    Recorder(path, **{field: value})
        with self.assertRaisesRegex(ValueError, "perturbation 'ulp\\+1': must be one of"):
            RecorderOptions(perturbation="ulp+1")
        with self.assertRaisesRegex(ValueError, "skip_first_step=True records perturbation 'skip', not 'seed'"):
            RecorderOptions(skip_first_step=True, perturbation="seed")
        reference = os.path.join(self.dir.name, "ref.h5")
        open(reference, "w").close()  # (the guard's arguments are checked where a reference is given)
        with self.assertRaisesRegex(ValueError, "judge_every=0"):
            dataclasses.replace(RecorderOptions(), reference=reference, judge_every=0)
        RecorderOptions(judge_every=0)  # no reference: no guard, nothing to check
        self.assertFalse(os.path.exists(path))

    def test_the_keywords_type_names_every_option(self):
        """RecorderKeywords (the keywords' types, for type checkers) and RecorderOptions name the same fields."""
        fields = {f.name: f.type for f in dataclasses.fields(RecorderOptions)}
        self.assertEqual(RecorderKeywords.__annotations__.keys(), fields.keys())
        for name, hint in RecorderKeywords.__annotations__.items():
            self.assertEqual(getattr(hint, "__forward_arg__", hint), fields[name], name)  # the same type, spelled alike


def _fp16_scaled_attributes(model, loss_of, lr):
    """Six steps of fp16 autocast with a GradScaler at 65536 (SGD at lr), recorded with track_nonfinite: the file's
    attributes."""
    import h5py

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.h5")
        with Recorder(path, model, opt, scaler, overwrite=True, track_nonfinite=True) as rec:
            for _ in range(6):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = loss_of()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
                rec.step(loss)
        with h5py.File(path) as f:
            return {k: str(f.attrs[k]) for k in f.attrs}


def _attention_plant():
    """An attention whose keys are x 1e4 and queries x 1e-4 (the logits unchanged), and its loss x 100: under fp16
    autocast with a GradScaler at 65536 the forward is finite and the backward of scaled_dot_product_attention
    overflows. (model, loss_of)"""
    import torch.nn.functional as F

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

        def forward(self, x):
            heads = [t.view(4, 16, 4, 8).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x))]
            return F.scaled_dot_product_attention(*heads, is_causal=True)

    torch.manual_seed(0)
    m = Attention()
    with torch.no_grad():
        m.k.weight.mul_(1e4)
        m.q.weight.mul_(1e-4)
    x = torch.randn(4, 16, 32)
    return m, lambda: (m(x).float() ** 2).mean() * 100


class NonfiniteOpTest(unittest.TestCase):
    def test_a_backward_overflow_names_where_the_gradient_came_from(self):
        # fp16 autocast, a GradScaler at 65536 and a loss x 1e4: the backward overflows in the cast of the output's
        # gradient (downstream of the last Linear, whose parameter gradients are the first non-finite ones): the trace
        # at the next step says the gradient reaching that module was already non-finite

        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        x, y = torch.randn(64, 8), torch.randn(64, 4)
        attrs = _fp16_scaled_attributes(m, lambda: ((m(x).float() - y) ** 2).mean() * 1e4, lr=1e-3)
        self.assertEqual((attrs["first_nonfinite_module"], attrs["first_nonfinite_pass"]), ("2", "backward"), attrs)
        op = attrs["first_nonfinite_op"]
        self.assertTrue(
            op.startswith(
                "in 2's backward (traced at step 1): the gradient reaching its output was already non-finite"
            ),
            op,
        )
        self.assertIn("non-finite gradients of weight, bias", op)
        # the operation trace: the first node whose backward met a non-finite gradient is the model's last linear,
        # and that gradient came from the loss computed outside the model (its .float() cast, scaled by 65536)
        self.assertIn(
            "the first operation whose backward made a gradient non-finite: none in the model's forward: the gradient "
            "reaching ",
            op,
        )
        self.assertIn("(linear in 2) was already non-finite — it came from outside the model's forward", op)

    def test_a_failing_trace_never_fails_the_training(self):
        # the SDPA replay raising (as a backend might on inputs it was never meant for): the run still records all
        # six steps and says the replay failed, instead of the exception reaching the user's loop from rec.step()
        from unittest import mock

        def broken(*args, **kwargs):
            raise RuntimeError("a backend that cannot replay")

        with mock.patch("ampcheck.nonfinite_ops.replay_sdpa", broken):
            attrs = _fp16_scaled_attributes(*_attention_plant(), lr=1e-6)
        self.assertEqual(attrs["status"], "completed", attrs)
        self.assertIn(
            "its replay per backend failed (RuntimeError: a backend that cannot replay)", attrs["first_nonfinite_op"]
        )

    def test_an_attention_backward_overflow_is_replayed_per_sdpa_backend(self):
        # fp16 autocast, GradScaler at 65536, keys x 1e4 and queries x 1e-4 (the logits unchanged), loss x 100: the
        # forward is finite, the backward of scaled_dot_product_attention overflows (the value gradient, a causal sum
        # of up to 16 incoming gradients of ~6e3: ~7.6e4 in float32 > 65504). The margin (16% above fp16's largest
        # in float32, the incoming gradient 10x below it) holds across CPUs' rounding.
        attrs = _fp16_scaled_attributes(*_attention_plant(), lr=1e-6)
        self.assertEqual(attrs["first_nonfinite_pass"], "backward", attrs)
        op = attrs["first_nonfinite_op"]
        self.assertRegex(
            op,
            r"the first operation whose backward made a gradient non-finite: ScaledDotProduct\w*Backward0 "
            r"\(scaled_dot_product_attention in \(the model\)\): incoming gradient float16 finite",
        )
        self.assertIn("replayed on its captured inputs per backend (float16): math non-finite (float16 gradient of", op)
        self.assertIn("flash non-finite (float16 gradient of", op)
        self.assertRegex(
            op,
            r"math in float32 finite \(largest \|grad\| [0-9.e+]+\): the gradient itself exceeds "
            r"float16's largest 65504",
        )


if __name__ == "__main__":
    unittest.main(verbosity=2)
