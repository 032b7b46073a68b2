// The engine option train.fused_param_norm: kernels::adamw_square_sums_ (AdamW's step with the updated parameters'
// sums of squares from the same pass, and without a scale the grads' too) against ATen's _fused_adamw_ and the norms'
// own passes (kernels::square_sum_nonfinite) — its reference on the CPU, the CUDA kernel on a GPU, where both must hold
// bit for bit — and training runs with the option against runs without it.
#include "test_support.h"

#include "engine/trainer.h"
#include "kernels/fused.h"

#include <cmath>

using namespace ampcheck;

namespace {

struct AdamState {
  std::vector<at::Tensor> p, g, m, v, steps;
  AdamState clone() const {
    AdamState c;
    for (const auto* from : {&p, &g, &m, &v, &steps}) {
      auto* to = from == &p ? &c.p : from == &g ? &c.g : from == &m ? &c.m : from == &v ? &c.v : &c.steps;
      for (const auto& t : *from) to->push_back(t.clone());
    }
    return c;
  }
};

// fp32 parameters of sizes below, at and across the kernel's 8-element vectors and 8192-element blocks; `copies` of
// the list (more than one launch's 48 tensors where copies > 5); with `unaligned`, one parameter whose storage starts
// off 16-byte alignment (the kernel's element-by-element path). Moments as after some steps (v > 0), step counts 3.
AdamState adam_state(const at::Device& dev, int copies, bool unaligned) {
  at::manual_seed(11);
  AdamState s;
  for (int c = 0; c < copies; ++c)
    for (int64_t n : {1, 7, 8, 9, 8191, 8192, 8193, 30011}) {
      s.p.push_back(at::randn({n}).to(dev));
      s.g.push_back((at::randn({n}) * 1e-2).to(dev));
      s.m.push_back((at::randn({n}) * 1e-3).to(dev));
      s.v.push_back((at::rand({n}) * 1e-5).to(dev));
      s.steps.push_back(at::full({}, 3.0f).to(dev));
    }
  if (unaligned) {
    for (auto* list : {&s.p, &s.g, &s.m, &s.v}) list->push_back((at::randn({4097}) * 1e-2).to(dev).narrow(0, 1, 4096));
    s.v.back().abs_();  // (in place: still the view off alignment)
    s.steps.push_back(at::full({}, 3.0f).to(dev));
  }
  return s;
}

std::vector<int64_t> layout(const std::vector<at::Tensor>& ps, int64_t* total) {
  std::vector<int64_t> first;
  int64_t P = 0;
  for (const auto& p : ps) {
    first.push_back(P);
    P += kernels::square_sum_parts(p.numel());
  }
  *total = P;
  return first;
}

double sum_sq64(const std::vector<at::Tensor>& ts) {
  double s = 0;
  for (const auto& t : ts) s += t.to(at::kDouble).square().sum().item<double>();
  return s;
}

// ATen's step on `a`, adamw_square_sums_ on `b`: the states after it compared by `same` (bit for bit or not), the
// partials' total against the parameter norm's own pass on the updated parameters.
struct Outcome {
  bool states_equal = true;
  at::Tensor total, pass;    // the parameters' partials summed; the norm pass over the updated parameters
  at::Tensor gtotal, gpass;  // without a scale: the grads' partials summed; the pass over the grads as they were
};
Outcome step_both(const AdamState& start, bool lr_tensor, double wd, const c10::optional<at::Tensor>& scale,
                  const c10::optional<at::Tensor>& found, kernels::Impl impl) {
  AdamState a = start.clone(), b = start.clone();
  const at::Device dev = start.p[0].device();
  const at::Tensor lr =
      lr_tensor ? at::full({}, 3e-4, at::TensorOptions().dtype(at::kFloat).device(dev)) : at::Tensor();
  if (lr_tensor)
    at::_fused_adamw_(a.p, a.g, a.m, a.v, {}, a.steps, lr, 0.9, 0.95, wd, 1e-8, false, false, scale, found);
  else
    at::_fused_adamw_(a.p, a.g, a.m, a.v, {}, a.steps, 3e-4, 0.9, 0.95, wd, 1e-8, false, false, scale, found);
  int64_t P = 0;
  const auto first = layout(b.p, &P);
  at::Tensor parts = at::full({P}, NAN, at::TensorOptions().dtype(at::kFloat).device(dev));
  at::Tensor gparts = at::full({P}, NAN, at::TensorOptions().dtype(at::kFloat).device(dev));
  Outcome o;
  if (!scale) o.gpass = kernels::square_sum_nonfinite(b.g, impl).first;
  kernels::adamw_square_sums_(b.p, b.g, b.m, b.v, b.steps, lr, 3e-4, 0.9, 0.95, wd, 1e-8, scale, found, parts, first,
                              impl, scale ? nullptr : &gparts);
  if (!scale) o.gtotal = kernels::square_sum_total(gparts, impl);
  for (size_t t = 0; t < a.p.size(); ++t)
    o.states_equal = o.states_equal && at::equal(a.p[t], b.p[t]) && at::equal(a.g[t], b.g[t]) &&
                     at::equal(a.m[t], b.m[t]) && at::equal(a.v[t], b.v[t]);
  o.total = kernels::square_sum_total(parts, impl);
  o.pass = kernels::square_sum_nonfinite(b.p, impl).first;
  return o;
}

// The reference (CPU): the update is at::_fused_adamw_ itself — bit for bit —, the partials' total the Σ p² of the
// updated parameters within 1e-5 relative of float64 (fp32 sums of fp32 squares, another order than the pass's).
TEST(FusedParamNorm, ReferenceIsFusedAdamWWithTheSumOfSquares) {
  const AdamState s = adam_state(at::kCPU, 1, /*unaligned=*/true);
  const at::Tensor scale = at::full({}, 1024.0f), zero = at::zeros({}), one = at::ones({});
  for (double wd : {0.0, 0.1})
    for (bool lr_tensor : {false, true}) {
      Outcome plain = step_both(s, lr_tensor, wd, c10::nullopt, c10::nullopt, kernels::Impl::Auto);
      EXPECT_TRUE(plain.states_equal) << "wd " << wd << " lr tensor " << lr_tensor;
      Outcome scaled = step_both(s, lr_tensor, wd, scale, zero, kernels::Impl::Auto);
      EXPECT_TRUE(scaled.states_equal);
      AdamState after = s.clone();
      at::_fused_adamw_(after.p, after.g, after.m, after.v, {}, after.steps, 3e-4, 0.9, 0.95, wd, 1e-8, false, false,
                        c10::nullopt, c10::nullopt);
      const double want = sum_sq64(after.p);
      EXPECT_NEAR(plain.total.item<double>(), want, 1e-5 * want);
      EXPECT_NEAR(plain.pass.item<double>(), want, 1e-5 * want);
      const double gwant = sum_sq64(s.g);  // the grads' partials (no scale): of the grads as they were
      EXPECT_NEAR(plain.gtotal.item<double>(), gwant, 1e-5 * gwant);
    }
  // found_inf = 1: nothing updated; the sums are of the parameters as they were
  Outcome skipped = step_both(s, false, 0.1, scale, one, kernels::Impl::Auto);
  EXPECT_TRUE(skipped.states_equal);
  const double before = sum_sq64(s.p);
  EXPECT_NEAR(skipped.total.item<double>(), before, 1e-5 * before);
}

TEST(FusedParamNorm, BadArgumentsAreRefused) {
  AdamState s = adam_state(at::kCPU, 1, false);
  int64_t P = 0;
  const auto first = layout(s.p, &P);
  at::Tensor small = at::zeros({P - 1});
  EXPECT_THROW(kernels::adamw_square_sums_(s.p, s.g, s.m, s.v, s.steps, {}, 1e-3, 0.9, 0.95, 0, 1e-8, c10::nullopt,
                                           c10::nullopt, small, first),
               c10::Error);
  at::Tensor parts = at::zeros({P});
  auto half_m = s.m;
  half_m[0] = half_m[0].to(at::kHalf);
  EXPECT_THROW(kernels::adamw_square_sums_(s.p, s.g, half_m, s.v, s.steps, {}, 1e-3, 0.9, 0.95, 0, 1e-8, c10::nullopt,
                                           c10::nullopt, parts, first),
               c10::Error);
  at::Tensor gparts = at::zeros({P});
  EXPECT_THROW(kernels::adamw_square_sums_(s.p, s.g, s.m, s.v, s.steps, {}, 1e-3, 0.9, 0.95, 0, 1e-8, at::ones({}),
                                           at::zeros({}), parts, first, kernels::Impl::Auto, &gparts),
               c10::Error);  // the grads' sums are of unscaled grads only
  auto short_first = first;
  short_first.pop_back();
  EXPECT_THROW(kernels::square_sum_parts_(s.p, parts, short_first), c10::Error);
}

// Training with the option against without, on the CPU (the reference): the same losses, skipped steps and loss
// scales bit for bit (the update is ATen's either way), parameter norms within 1e-5 relative (the partials summed in
// another order than the pass's). fp16 + GradScaler with fused AdamW and a NaN planted at step 4 (a skipped step: its
// sums are of the unchanged parameters), bf16, and where the option does not apply: fp16 with fp32 master weights (the
// optimizer steps the fp32 copies) and pure bf16 (model.to(bfloat16): parameters AdamW's kernel does not sum).
TEST(FusedParamNorm, TrainingRunWithTheOptionMatchesWithout) {
  for (const std::string strategy : {"fp16-autocast", "bf16-autocast", "fp16-master", "bf16-pure"}) {
    engine::RunConfig a = ampcheck::testing::micro_run(strategy, 8);
    a.optimizer.fused = true;
    a.loop.fused_grad_check = true;
    if (strategy == "fp16-autocast")
      ampcheck::inject::add_injections(a, {ampcheck::testing::grad_injection(4, NAN, "wte", 3)});
    engine::RunConfig b = a;
    b.loop.fused_param_norm = true;
    engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
    ta.run();
    tb.run();
    // (bf16 autocast, no scaler: the gradient norm too from AdamW's read of the grads)
    ASSERT_NO_FATAL_FAILURE(
        ampcheck::testing::expect_same_run_but_norms(ta.trajectory(), tb.trajectory(), 8, 1e-5, strategy));
    const auto& ra = ta.trajectory().rows;
    if (strategy == "fp16-autocast")
      EXPECT_EQ(ra[4][trajectory::kSkipped], 1.0) << "the planted NaN must skip its step";
    // where the option applies the norms did come from AdamW's pass: the parameters' sum always, the grads' only
    // without a GradScaler; with master weights it does not apply (the optimizer steps the fp32 copies)
    const bool applies = strategy != "fp16-master" && strategy != "bf16-pure";
    EXPECT_EQ(tb.optimizer().param_square_sum().defined(), applies) << strategy;
    EXPECT_EQ(tb.optimizer().grad_square_sum().defined(), strategy == "bf16-autocast") << strategy;
    EXPECT_FALSE(ta.optimizer().param_square_sum().defined()) << strategy << ": without the option";
    if (applies) {
      double sq = 0;
      for (const auto& p : tb.model().parameter_tensors()) sq += p.to(at::kDouble).square().sum().item<double>();
      EXPECT_NEAR(tb.optimizer().param_square_sum().item<double>(), sq, 1e-5 * sq) << strategy;
      // a state load may bring other parameters: the sums no longer stand for them
      tb.optimizer().load_state(tb.optimizer().state());
      EXPECT_FALSE(tb.optimizer().param_square_sum().defined()) << strategy << ": after a state load";
      EXPECT_FALSE(tb.optimizer().grad_square_sum().defined()) << strategy << ": after a state load";
    }
  }
}

// On a GPU: the kernel's update bit for bit _fused_adamw_'s (params, unscaled grads, both moments), with weight decay
// and without, the learning rate as a number and as a device tensor, a GradScaler's scale with found_inf 0 and 1, a
// parameter off 16-byte alignment, more than one launch's tensors; and the partials' total bit for bit the parameter
// norm's own pass over the updated parameters (square_sum_nonfinite) — what lets the trainer drop that pass.
TEST(CudaKernels, AdamWMatchesFusedAdamW) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  const at::Device cuda(at::kCUDA, 0);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(cuda);
  const at::Tensor scale = at::full({}, 1024.0f, f32), zero = at::zeros({}, f32), one = at::ones({}, f32);
  for (int copies : {1, 7})
    for (bool unaligned : {false, true}) {
      const AdamState s = adam_state(cuda, copies, unaligned);
      const std::string what = std::to_string(s.p.size()) + " tensors" + (unaligned ? ", one unaligned" : "");
      for (double wd : {0.0, 0.1})
        for (bool lr_tensor : {false, true}) {
          for (int scaled = 0; scaled < 3; ++scaled) {  // none; scale with found_inf 0; scale with found_inf 1
            const auto sc = scaled ? c10::optional<at::Tensor>(scale) : c10::nullopt;
            const auto fi = scaled == 1   ? c10::optional<at::Tensor>(zero)
                            : scaled == 2 ? c10::optional<at::Tensor>(one)
                                          : c10::nullopt;
            Outcome o = step_both(s, lr_tensor, wd, sc, fi, kernels::Impl::Auto);
            const std::string at = what + ", wd " + std::to_string(wd) + ", lr tensor " + std::to_string(lr_tensor) +
                                   ", scaled " + std::to_string(scaled);
            EXPECT_TRUE(o.states_equal) << at;
            EXPECT_TRUE(at::equal(o.total, o.pass))
                << at << ": " << o.total.item<double>() << " vs " << o.pass.item<double>();
            if (!scaled)  // the grads' partials (no scale): bit for bit the gradient norm's pass
              EXPECT_TRUE(at::equal(o.gtotal, o.gpass))
                  << at << ": " << o.gtotal.item<double>() << " vs " << o.gpass.item<double>();
          }
        }
    }
}

// On a GPU, a captured fast run: with the option every trajectory column bit for bit what the run without it writes
// (the update and the norm are), bf16 and fp16 + GradScaler (fused AdamW).
TEST(CudaKernels, FusedParamNormRunIsTheRunWithout) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  for (const std::string strategy : {"bf16-autocast", "fp16-autocast"}) {
    engine::RunConfig a = ampcheck::testing::micro_run(strategy, 12);
    a.optimizer.fused = true;
    a.loop.cuda_graphs = a.loop.fused_grad_check = true;
    a.loop.probe_every = 4;
    engine::RunConfig b = a;
    b.loop.fused_param_norm = true;
    engine::Trainer ta(a, at::Device(at::kCUDA, 0)), tb(b, at::Device(at::kCUDA, 0));
    ta.run();
    tb.run();
    SCOPED_TRACE(strategy);
    EXPECT_TRUE(tb.optimizer().param_square_sum().defined()) << "the option must have taken the norm from AdamW's pass";
    ampcheck::testing::expect_identical_trajectories(ta.trajectory(), tb.trajectory());
  }
}

}  // namespace
