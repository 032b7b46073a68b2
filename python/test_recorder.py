"""Tests of python/ampcheck_recorder.py against values computed by hand in the same loop (Python torch 2.11, CPU).

Tolerances: the recorder reduces in float64 over per-tensor float32 norms, the hand computation over one concatenated
float64 vector; they agree to 1e-6 relative (float32 rounding of each per-tensor norm, ~6e-8, with margin).
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import h5py
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ampcheck_recorder import Recorder  # noqa: E402

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
        with Recorder(self.path, model, opt, scaler, attributes={"strategy": "test"}) as rec:
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
                expected.append(dict(loss=loss.item(), grad_norm=(grads.norm() / scale).item(), loss_scale=scale,
                                     update_norm=(after - before).norm().item(), param_norm=after.norm().item(),
                                     frac_zero_grad=(grads == 0).double().mean().item(),
                                     frac_nonfinite_grad=(~grads.isfinite()).double().mean().item(),
                                     lr=0.1 / (step + 1), skipped=float(step == 2)))
                rec.step(loss)
        attrs, steps = read_h5(self.path)
        self.assertEqual(attrs["format"], "ampcheck-trajectory")
        self.assertEqual(attrs["format_version"], "1")
        self.assertEqual(attrs["status"], "completed")
        self.assertEqual(attrs["strategy"], "test")
        self.assertEqual(attrs["model_parameters"], str(sum(p.numel() for p in model.parameters())))
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

    def test_without_after_backward_grads_are_read_at_step(self):
        """One call per step: the grad columns are of the grads as the step left them (unscaled by scaler.step)."""
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
        with Recorder(self.path, model, opt, scaler) as rec:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            true_norm = (torch.cat([p.grad.reshape(-1).double() for p in model.parameters()]).norm() / 256.0).item()
            scaler.step(opt)
            scaler.update()
            rec.step(loss)
        _, steps = read_h5(self.path)
        self.assertLessEqual(abs(steps["grad_norm"][0] - true_norm), REL * true_norm)
        self.assertEqual(steps["loss_scale"][0], 256.0)
        self.assertEqual(steps["skipped"][0], 0.0)

    def test_fused_adamw_skip_is_seen_through_found_inf(self):
        """A fused optimizer: GradScaler calls step() with found_inf and the kernel skips; the recorder reads found_inf."""
        model, x, y = model_and_data()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        with Recorder(self.path, model, opt, scaler) as rec:
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
            with Recorder(self.path, model, opt, scaler) as rec:
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
            sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
