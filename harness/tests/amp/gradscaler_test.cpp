// CPU behaviour tests for ampcheck's GradScaler, written from PyTorch 2.11's GradScaler rules and mirroring
// PyTorch's own GradScaler tests (test_torch.py / test_cuda.py / test_optim.py): the update-scale arithmetic, unscale_
// finding inf/nan in contiguous, transposed and sliced grads and in mixed float32/bfloat16 lists, the fused-optimizer
// hand-over (grad_scale / found_inf, fp16 grads allowed there), state_dict round trips with and without lazy
// initialisation, the disabled scaler as a pass-through, no overflow of a huge scale, grads broken after unscale_
// still being stepped, a fused AdamW with found_inf = 1 leaving params and step count alone, and a pure-fp16 model
// whose step() is refused without touching params or grads. Expected values come from the rules (scale x growth,
// scale x backoff, 1/scale rounded to float32), never from a previous run.
#include <ATen/ATen.h>
#include <ampcheck/amp/grad_scaler.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <set>

#include "amp_test_support.h"

namespace ampcheck::amp {
namespace {

using test::FusedAdamW;
using test::SameBits;
using test::Sgd;

const auto kF32 = at::TensorOptions().dtype(at::kFloat);
constexpr double kInf = std::numeric_limits<double>::infinity();

GradScalerOptions Options(double init_scale, double growth = 2.0, double backoff = 0.5, int64_t interval = 2000) {
  return GradScalerOptions{init_scale, growth, backoff, interval, true};
}

at::Tensor Param(const at::Tensor& grad) {
  at::Tensor p = at::zeros_like(grad, at::MemoryFormat::Contiguous).set_requires_grad(true);
  p.mutable_grad() = grad;
  return p;
}

// One scale()/step()/update() iteration with a single finite or non-finite grad.
void Iterate(GradScaler& scaler, double grad_value) {
  Sgd opt({Param(at::full({2}, grad_value, kF32))}, 0.1);
  scaler.scale(at::ones({}, kF32));
  scaler.step(opt);
  scaler.update();
}

// Optimizer test double for the fused path: records what GradScaler hands over and touches nothing.
class RecordingFusedOptimizer : public ScalableOptimizer {
 public:
  explicit RecordingFusedOptimizer(std::vector<at::Tensor> params) : params_(std::move(params)) {}
  std::vector<at::Tensor> scaled_parameters() const override { return params_; }
  bool supports_amp_scaling() const override { return true; }
  void step() override { ADD_FAILURE() << "plain step() called on a fused optimizer"; }
  void step_with_amp_scaling(const c10::optional<at::Tensor>& grad_scale, const at::Tensor& found_inf) override {
    grad_scale_ = grad_scale;
    found_inf_ = found_inf.clone();
    ++calls_;
  }
  c10::optional<at::Tensor> grad_scale_;
  at::Tensor found_inf_;
  int calls_ = 0;

 private:
  std::vector<at::Tensor> params_;
};

TEST(GradScaler, DefaultsAndLazyInitMatchPyTorch) {
  const GradScalerOptions d;
  EXPECT_EQ(d.init_scale, std::ldexp(1.0, 16));
  EXPECT_EQ(d.growth_factor, 2.0);
  EXPECT_EQ(d.backoff_factor, 0.5);
  EXPECT_EQ(d.growth_interval, 2000);
  GradScaler scaler(at::kCPU, Options(1234.5));
  EXPECT_FALSE(scaler.scale_tensor().defined()) << "the scale must be created lazily, by scale()";
  EXPECT_EQ(scaler.get_scale(), 1234.5) << "get_scale() before scale() is the init scale";
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  const at::Tensor out = scaler.scale(at::full({3}, 2.0, kF32));
  ASSERT_TRUE(scaler.scale_tensor().defined());
  EXPECT_EQ(scaler.scale_tensor().dim(), 0);
  EXPECT_EQ(scaler.scale_tensor().scalar_type(), at::kFloat);
  EXPECT_EQ(scaler.scale_tensor().device(), out.device());
  EXPECT_TRUE(SameBits(out, at::full({3}, 2.0 * 1234.5, kF32))) << "scale(outputs) = outputs * scale";
}

// test_grad_scaling_update_scale: scale 4, growth 2, backoff 0.25, interval 2: clean, clean -> 8; inf -> 2.
TEST(GradScaler, UpdateScaleArithmeticMatchesRule) {
  const double init = 4.0, growth = 2.0, backoff = 0.25;
  GradScaler scaler(at::kCPU, Options(init, growth, backoff, 2));
  Iterate(scaler, 1.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 1) << "after clean step 1";
  EXPECT_EQ(scaler.get_scale(), init) << "after clean step 1: below the growth interval";
  Iterate(scaler, 1.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0) << "after clean step 2: tracker reset on growth";
  EXPECT_EQ(scaler.get_scale(), init * growth) << "after clean step 2";
  Iterate(scaler, kInf);
  EXPECT_EQ(scaler.get_growth_tracker(), 0) << "after the inf step";
  EXPECT_EQ(scaler.get_scale(), init * growth * backoff) << "after the inf step";
}

TEST(GradScaler, NanSkipsAndResetsTheTrackerLikeInf) {
  const double init = 1024.0, backoff = 0.5;
  GradScaler scaler(at::kCPU, Options(init, 2.0, backoff, 3));
  Iterate(scaler, 1.0);
  Iterate(scaler, 1.0);
  ASSERT_EQ(scaler.get_growth_tracker(), 2);
  Sgd opt({Param(at::full({2}, std::nan(""), kF32))}, 0.1);
  scaler.scale(at::ones({}, kF32));
  EXPECT_FALSE(scaler.step(opt)) << "a nan grad must skip optimizer.step()";
  EXPECT_EQ(opt.steps_taken(), 0);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), init * backoff);
  EXPECT_EQ(scaler.get_growth_tracker(), 0) << "a skipped step resets the tracker";
  Iterate(scaler, -kInf);
  EXPECT_EQ(scaler.get_scale(), init * backoff * backoff) << "-inf skips too; no lower clamp on the scale";
}

// unscale_ multiplies by float32(1 / scale computed in double) -- it does not divide by the scale, which rounds
// differently -- also for a scale that is not a power of two.
TEST(GradScaler, UnscaleUsesDoubleReciprocalRoundedToFloat) {
  const double init = 1234.5;
  at::Generator gen = at::detail::createCPUGenerator(7);
  const at::Tensor g32 = at::randn({5, 7}, gen), g16 = at::randn({9}, gen).to(at::kBFloat16);
  Sgd opt({Param(g32.clone()), Param(g16.clone())}, 0.1);
  GradScaler scaler(at::kCPU, Options(init));
  scaler.scale(at::ones({}, kF32));
  scaler.unscale_(opt);
  const at::Tensor inv = at::scalar_tensor(static_cast<float>(1.0 / init), kF32);
  EXPECT_TRUE(SameBits(opt.params()[0].grad(), g32 * inv)) << "float32 grad";
  EXPECT_TRUE(SameBits(opt.params()[1].grad(), g16 * inv)) << "bfloat16 grad (math in float, rounded back)";
}

// test_grad_scaling_unscale: contiguous, transposed (dense) and sliced (not dense) grads, with inf/nan or not.
TEST(GradScaler, UnscaleFindsInfAndNanInContiguousTransposedAndSlicedGrads) {
  const double value = 4.0, init = 4.0;  // powers of two: value / init is exact
  const at::Tensor g = at::full({20, 20}, value, kF32);
  at::Tensor ginf = g.clone(), gnan = g.clone();
  ginf.index_put_({2, 2}, kInf);
  gnan.index_put_({2, 2}, std::nan(""));
  auto sl = [](const at::Tensor& t) { return t.clone().slice(1, 0, 5); };
  struct Case {
    const char* name;
    std::vector<at::Tensor> grads;
    bool has_inf;
  };
  const std::vector<Case> cases = {
      {"contiguous, contiguous", {g.clone(), g.clone()}, false},
      {"contiguous, transposed", {g.clone(), g.clone().t()}, false},
      {"contiguous, sliced", {g.clone(), sl(g)}, false},
      {"sliced, sliced", {sl(g), sl(g)}, false},
      {"contiguous, contiguous inf", {g.clone(), ginf.clone()}, true},
      {"contiguous, contiguous nan", {g.clone(), gnan.clone()}, true},
      {"contiguous, sliced inf", {g.clone(), sl(ginf)}, true},
      {"contiguous, sliced nan", {g.clone(), sl(gnan)}, true},
      {"contiguous inf, sliced", {ginf.clone(), sl(g)}, true},
      {"sliced inf, sliced", {sl(ginf), sl(g)}, true},
      {"transposed nan, contiguous", {gnan.clone().t(), g.clone()}, true},
  };
  for (const Case& c : cases) {
    std::vector<at::Tensor> params;
    for (const auto& grad : c.grads) params.push_back(Param(grad));
    Sgd opt(params, 1.0);
    GradScaler scaler(at::kCPU, Options(init));
    scaler.scale(at::ones({}, kF32));
    scaler.unscale_(opt);
    EXPECT_EQ(scaler.found_inf(opt).item<double>(), c.has_inf ? 1.0 : 0.0) << c.name << ": found_inf";
    for (size_t i = 0; i < c.grads.size(); ++i) {
      EXPECT_TRUE(params[i].grad().is_same(c.grads[i])) << c.name << ": grad " << i << " must be unscaled in place";
      // Every element is unscaled, the non-finite one included (it stays non-finite).
      const at::Tensor finite = c.grads[i].isfinite();
      EXPECT_TRUE(
          SameBits(c.grads[i].masked_select(finite), at::full({finite.sum().item<int64_t>()}, value / init, kF32)))
          << c.name << ": grad " << i << " finite values after unscale_";
    }
  }
}

// The "perfect storm" list of test_grad_scaling_unscale, with bfloat16 in place of float16 (our public unscale_
// refuses fp16, as Python's does): grads of two dtypes and two layouts, an inf planted in each in turn.
TEST(GradScaler, UnscaleGroupsMixedFloatAndBfloat16Grads) {
  const double value = 4.0, init = 4.0;
  const at::Tensor g = at::full({20, 20}, value, kF32);
  for (int inject = -1; inject < 4; ++inject) {
    std::vector<at::Tensor> grads = {g.clone(), g.clone().slice(1, 0, 5), g.to(at::kBFloat16), g.to(at::kBFloat16).t()};
    if (inject >= 0) grads[inject].index_put_({2, 2}, kInf);
    std::vector<at::Tensor> params;
    for (const auto& grad : grads) params.push_back(Param(grad));
    Sgd opt(params, 1.0);
    GradScaler scaler(at::kCPU, Options(init));
    scaler.scale(at::ones({}, kF32));
    scaler.unscale_(opt);
    EXPECT_EQ(scaler.found_inf(opt).item<double>(), inject >= 0 ? 1.0 : 0.0) << "inf planted in grad " << inject;
    if (inject < 0)
      for (size_t i = 0; i < grads.size(); ++i)
        EXPECT_TRUE(SameBits(grads[i], at::full_like(grads[i], value / init)))
            << "grad " << i << " (" << grads[i].scalar_type() << ")";
  }
}

// step() with a fused optimizer: no host-side skip; grad_scale is the scale unless unscale_ ran; found_inf comes
// from _check_inf_per_device, which accepts fp16 grads and leaves them as they are (inv_scale 1).
TEST(GradScaler, FusedOptimizerGetsScaleAndFoundInfInsteadOfHostSkip) {
  const double init = 512.0;
  at::Tensor g16 = at::full({4}, 3.0, at::TensorOptions().dtype(at::kHalf));
  g16.index_put_({1}, kInf);
  const at::Tensor g16_before = g16.clone();
  RecordingFusedOptimizer fused({Param(g16)});
  GradScaler scaler(at::kCPU, Options(init));
  scaler.scale(at::ones({}, kF32));
  EXPECT_TRUE(scaler.step(fused)) << "a fused optimizer is always called; it skips on the device";
  ASSERT_EQ(fused.calls_, 1);
  ASSERT_TRUE(fused.grad_scale_.has_value()) << "grads not unscaled yet: grad_scale must be handed over";
  EXPECT_TRUE(SameBits(*fused.grad_scale_, at::scalar_tensor(init, kF32))) << "grad_scale";
  EXPECT_EQ(fused.found_inf_.item<double>(), 1.0) << "found_inf for an fp16 grad holding inf";
  EXPECT_TRUE(SameBits(g16, g16_before)) << "the inf check must not change fp16 grads";
  EXPECT_EQ(scaler.stage(fused), GradScaler::Stage::STEPPED);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), init * 0.5) << "the fused path's found_inf feeds update()";

  RecordingFusedOptimizer unscaled({Param(at::full({3}, 3.0, kF32))});
  scaler.scale(at::ones({}, kF32));
  scaler.unscale_(unscaled);
  scaler.step(unscaled);
  EXPECT_FALSE(unscaled.grad_scale_.has_value()) << "after unscale_ no grad_scale is handed over";
  EXPECT_EQ(unscaled.found_inf_.item<double>(), 0.0);
}

// ampcheck's record_inf_check (no Python counterpart): a check recorded by the caller is what step() hands the fused
// optimizer and update() reads — here a recorded 1 over finite grads, so the scaler cannot have checked itself —;
// without a record step() checks as before; a second record, one after unscale_(), one for a non-fused optimizer
// and one before scale() are refused.
TEST(GradScaler, RecordedInfCheckStandsForTheFusedPathsOwn) {
  const double init = 256.0;
  GradScaler scaler(at::kCPU, Options(init));
  EXPECT_THROW(scaler.record_inf_check(*std::make_unique<RecordingFusedOptimizer>(std::vector<at::Tensor>{}),
                                       at::zeros({}, kF32)),
               GradScalerError)
      << "before scale()";
  RecordingFusedOptimizer fused({Param(at::full({3}, 2.0, kF32))});
  scaler.scale(at::ones({}, kF32));
  scaler.record_inf_check(fused, at::ones({}, kF32));
  EXPECT_THROW(scaler.record_inf_check(fused, at::ones({}, kF32)), GradScalerError) << "a second record";
  EXPECT_EQ(scaler.stage(fused), GradScaler::Stage::READY);
  scaler.step(fused);
  ASSERT_EQ(fused.calls_, 1);
  EXPECT_EQ(fused.found_inf_.item<double>(), 1.0) << "the recorded check, not one of the scaler's own";
  ASSERT_TRUE(fused.grad_scale_.has_value());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), init * 0.5) << "update() reads the recorded check";

  scaler.scale(at::ones({}, kF32));
  scaler.step(fused);  // no record: the scaler's own check of finite grads
  EXPECT_EQ(fused.found_inf_.item<double>(), 0.0);
  scaler.update();

  scaler.scale(at::ones({}, kF32));
  scaler.unscale_(fused);
  EXPECT_THROW(scaler.record_inf_check(fused, at::zeros({}, kF32)), GradScalerError) << "after unscale_()";
  Sgd plain({Param(at::full({2}, 1.0, kF32))}, 0.1);
  EXPECT_THROW(scaler.record_inf_check(plain, at::zeros({}, kF32)), GradScalerError) << "a non-fused optimizer";
}

// test_grad_scaling_state_dict, with and without the scale lazily initialised before loading.
TEST(GradScaler, StateDictRoundTripsWithAndWithoutLazyInit) {
  const std::set<std::string> keys = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"};
  for (bool lazy_init : {true, false}) {
    GradScaler s0(at::kCPU, Options(3.0, 4.0, 0.5, 2));
    GradScaler s1(at::kCPU, Options(6.0, 7.0, 0.8, 10));
    s1.load_state_dict({{"scale", 6.0},
                        {"growth_factor", 7.0},
                        {"backoff_factor", 0.8},
                        {"growth_interval", 10},
                        {"_growth_tracker", 7}});  // a tracker value the real load must overwrite
    if (lazy_init) s1.scale(at::full({1}, 4.0, kF32));
    const GradScalerStateDict sd = s0.state_dict();
    std::set<std::string> got_keys;
    for (const auto& [k, v] : sd) got_keys.insert(k);
    EXPECT_EQ(got_keys, keys);
    s1.load_state_dict(sd);
    EXPECT_EQ(s1.get_scale(), 3.0) << "lazy_init " << lazy_init;
    EXPECT_EQ(s1.get_growth_factor(), 4.0);
    EXPECT_EQ(s1.get_backoff_factor(), 0.5);
    EXPECT_EQ(s1.get_growth_interval(), 2);
    EXPECT_EQ(s1.get_growth_tracker(), 0) << "lazy_init " << lazy_init;
    if (!lazy_init) s1.scale(at::full({1}, 4.0, kF32));
    EXPECT_TRUE(SameBits(s1.scale_tensor(), at::scalar_tensor(3.0, kF32))) << "lazy_init " << lazy_init;
  }
  // Mid-run state survives a round trip: both scalers then evolve identically.
  GradScaler a(at::kCPU, Options(1000.0, 2.0, 0.5, 3));
  for (double v : {1.0, 1.0, kInf, 1.0}) Iterate(a, v);
  GradScaler b(at::kCPU, Options(1.0, 3.0, 0.25, 99));
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.state_dict(), a.state_dict());
  for (double v : {1.0, 1.0, 1.0, kInf, 1.0}) {
    Iterate(a, v);
    Iterate(b, v);
    EXPECT_EQ(b.get_scale(), a.get_scale());
    EXPECT_EQ(b.get_growth_tracker(), a.get_growth_tracker());
  }
}

TEST(GradScaler, DisabledScalerIsAPassThrough) {
  GradScalerOptions o = Options(1024.0, 0.5, 2.0);  // invalid factors are not checked when disabled
  o.enabled = false;
  GradScaler scaler(at::kCPU, o);
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  EXPECT_TRUE(scaler.state_dict().empty());
  EXPECT_NO_THROW(scaler.load_state_dict({}));
  const at::Tensor loss = at::full({}, 3.0, kF32);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss)) << "scale() returns its input unchanged";
  const std::vector<at::Tensor> outs = {loss, at::ones({2}, kF32)};
  const auto scaled = scaler.scale(outs);
  ASSERT_EQ(scaled.size(), 2u);
  EXPECT_TRUE(scaled[0].is_same(outs[0]) && scaled[1].is_same(outs[1]));
  at::Tensor grad = at::full({3}, kInf, kF32);
  Sgd opt({Param(grad)}, 1.0);
  scaler.unscale_(opt);
  EXPECT_TRUE(SameBits(grad, at::full({3}, kInf, kF32))) << "unscale_ is a no-op";
  EXPECT_TRUE(scaler.step(opt)) << "step() is optimizer.step(), inf grads or not";
  EXPECT_EQ(opt.steps_taken(), 1);
  EXPECT_NO_THROW(scaler.update());
  EXPECT_FALSE(scaler.scale_tensor().defined());
}

// A CUDA scaler where no CUDA device exists warns and disables itself (enabled as usual where one exists).
TEST(GradScaler, CudaScalerDisablesItselfWithoutCuda) {
  GradScaler scaler(at::kCUDA);
  EXPECT_EQ(scaler.is_enabled(), at::hasCUDA());
  if (!at::hasCUDA()) EXPECT_EQ(scaler.get_scale(), 1.0);
}

// test_grad_scale_will_not_overflow: init 1e38, growth 16: growth that would overflow is not applied.
TEST(GradScaler, HugeScaleDoesNotOverflowToInf) {
  GradScaler scaler(at::kCPU, Options(1e38, 16.0, 0.5, 1));
  Iterate(scaler, 1e-30);  // scaled grad 1e8: clean, so the interval-1 growth is due
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(static_cast<float>(1e38)))
      << "1e38 * 16 is not finite in float32, so the scale must stay";
  EXPECT_EQ(scaler.get_growth_tracker(), 0) << "the tracker resets even when growth is not applied";

  // PyTorch's version: a Linear(5, 1) model, tiny targets, Adam.
  at::Generator gen = at::detail::createCPUGenerator(3);
  at::Tensor w = at::randn({1, 5}, gen).set_requires_grad(true), b = at::randn({1}, gen).set_requires_grad(true);
  const at::Tensor x = at::randn({1, 5}, gen), y = 1e-30 * at::randn({1, 1}, gen);
  FusedAdamW adam({w, b}, {});
  GradScaler s2(at::kCPU, Options(1e38, 16.0, 0.5, 1));
  s2.scale((at::linear(x, w, b) - y).pow(2).mean()).backward();
  s2.step(adam);
  s2.update();
  EXPECT_TRUE(std::isfinite(s2.get_scale())) << "scale after one step: " << s2.get_scale();
}

// test_params_invalidated_with_grads_invalidated_between_unscale_and_step: unscale_ found nothing, so step() runs
// even though the grads were broken afterwards, and the params become non-finite. (From the second iteration on the
// non-finite params make non-finite grads, which unscale_ does see, so those steps are skipped.)
TEST(GradScaler, GradsBrokenAfterUnscaleAreStillStepped) {
  const test::TwoLinear model = test::TwoLinear::make(11);
  Sgd opt(model.params(), 1.0);
  GradScaler scaler(at::kCPU, Options(128.0));
  at::Generator gen = at::detail::createCPUGenerator(12);
  for (int i = 0; i < 4; ++i) {
    model.zero_grad();
    const at::Tensor x = at::randn({8, 8}, gen), t = at::randn({8, 8}, gen);
    scaler.scale(at::mse_loss(model.forward(x), t)).backward();
    scaler.unscale_(opt);
    {
      at::NoGradGuard no_grad;
      int j = 0;
      for (const at::Tensor& p : model.params()) p.grad().fill_(j++ % 2 ? kInf : std::nan(""));
    }
    const bool stepped = scaler.step(opt);
    if (i == 0) {
      EXPECT_TRUE(stepped) << "iteration 0: unscale_ recorded no inf, so the broken grads must be stepped";
      EXPECT_EQ(opt.steps_taken(), 1);
    }
    scaler.update();
    if (i == 0) EXPECT_EQ(scaler.get_growth_tracker(), 1) << "iteration 0 counts as clean";
  }
  for (const at::Tensor& p : model.params())
    EXPECT_TRUE((p.isnan() | p.isinf()).any().item<bool>()) << "param " << test::describe(p) << " stayed finite";
}

// test_fused_does_not_step_if_foundinf, directly and through the scaler.
TEST(GradScaler, FusedAdamWWithFoundInfLeavesParamsAndStepCountUnchanged) {
  std::vector<at::Tensor> params;
  for (int i = 0; i < 3; ++i) params.push_back(Param(at::ones({1}, kF32)));
  std::vector<at::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  FusedAdamW adam(params, {});
  adam.step_with_amp_scaling(at::ones({1}, kF32), at::ones({}, kF32));
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(SameBits(params[i], before[i])) << "param " << i;
    EXPECT_TRUE(SameBits(adam.state_step(i), at::zeros({}, kF32))) << "state step of param " << i;
  }

  const double init = 256.0;
  at::Tensor grad = at::full({4}, 2.0 * init, kF32);
  grad.index_put_({3}, kInf);
  const at::Tensor grad_before = grad.clone();
  at::Tensor p = Param(grad);
  const at::Tensor p_before = p.detach().clone();
  FusedAdamW adam2({p}, {});
  GradScaler scaler(at::kCPU, Options(init));
  scaler.scale(at::ones({}, kF32));
  scaler.step(adam2);
  EXPECT_TRUE(SameBits(p, p_before)) << "param after a step with inf grads";
  EXPECT_TRUE(SameBits(adam2.state_step(0), at::zeros({}, kF32))) << "AdamW step count after a skipped step";
  EXPECT_TRUE(SameBits(grad, grad_before)) << "the kernel returns before unscaling when found_inf is 1";
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), init * 0.5);

  grad.fill_(2.0 * scaler.get_scale());  // a clean step: grads unscaled by the kernel, count advances
  scaler.scale(at::ones({}, kF32));
  scaler.step(adam2);
  EXPECT_TRUE(SameBits(grad, at::full({4}, 2.0, kF32))) << "grad divided by grad_scale in the fused kernel";
  EXPECT_TRUE(SameBits(adam2.state_step(0), at::ones({}, kF32))) << "AdamW step count after a clean step";
  EXPECT_FALSE(SameBits(p, p_before)) << "param must change on a clean step";
}

// A model whose params (and so grads) are all float16: step() refuses, like Python, before touching anything.
TEST(GradScaler, Fp16ModelStepThrowsValueErrorAndLeavesParamsAndGradsUnchanged) {
  const auto f16 = at::TensorOptions().dtype(at::kHalf);
  at::Generator gen = at::detail::createCPUGenerator(5);
  at::Tensor w = at::randn({4, 3}, gen).to(at::kHalf).set_requires_grad(true);
  at::Tensor b = at::randn({4}, gen).to(at::kHalf).set_requires_grad(true);
  const at::Tensor x = at::randn({2, 3}, gen).to(at::kHalf);
  Sgd opt({w, b}, 0.1);
  GradScaler scaler(at::kCPU, Options(1024.0));  // small enough that the fp16 loss stays finite
  scaler.scale(((x.matmul(w.t()) + b) * at::ones({2, 4}, f16)).sum()).backward();
  ASSERT_EQ(w.grad().scalar_type(), at::kHalf);
  const at::Tensor w0 = w.detach().clone(), b0 = b.detach().clone(), gw0 = w.grad().clone(), gb0 = b.grad().clone();
  try {
    scaler.step(opt);
    ADD_FAILURE() << "step() with fp16 grads did not throw";
  } catch (const GradScalerError& e) {
    EXPECT_EQ(e.python_type(), GradScalerError::PythonType::ValueError);
    EXPECT_STREQ(e.what(), "Attempting to unscale FP16 gradients.");
  }
  EXPECT_EQ(opt.steps_taken(), 0);
  EXPECT_TRUE(SameBits(w, w0)) << "weight";
  EXPECT_TRUE(SameBits(b, b0)) << "bias";
  EXPECT_TRUE(SameBits(w.grad(), gw0)) << "weight grad";
  EXPECT_TRUE(SameBits(b.grad(), gb0)) << "bias grad";
  EXPECT_EQ(scaler.stage(opt), GradScaler::Stage::READY) << "the refused unscale_ must not advance the stage";
}

TEST(GradScaler, StagesAdvancePerOptimizerAndResetOnUpdate) {
  Sgd a({Param(at::ones({2}, kF32))}, 0.1), b({Param(at::ones({2}, kF32))}, 0.1);
  GradScaler scaler(at::kCPU, Options(8.0));
  scaler.scale(at::ones({}, kF32));
  EXPECT_EQ(scaler.stage(a), GradScaler::Stage::READY);
  EXPECT_FALSE(scaler.found_inf(a).defined()) << "no inf check recorded yet";
  scaler.unscale_(a);
  EXPECT_EQ(scaler.stage(a), GradScaler::Stage::UNSCALED);
  EXPECT_EQ(scaler.stage(b), GradScaler::Stage::READY) << "stages are per optimizer";
  scaler.step(a);
  scaler.step(b);
  EXPECT_EQ(scaler.stage(a), GradScaler::Stage::STEPPED);
  EXPECT_EQ(scaler.stage(b), GradScaler::Stage::STEPPED);
  scaler.update();
  EXPECT_EQ(scaler.stage(a), GradScaler::Stage::READY);
  EXPECT_EQ(scaler.stage(b), GradScaler::Stage::READY);
  EXPECT_FALSE(scaler.found_inf(a).defined()) << "update() clears the recorded checks";
}

TEST(GradScaler, ScaleOfAListMultipliesEachOutputKeepingItsDtype) {
  GradScaler scaler(at::kCPU, Options(64.0));
  const std::vector<at::Tensor> outs = {at::full({2}, 3.0, kF32), at::full({3}, 0.75, kF32).to(at::kBFloat16),
                                        at::full({}, -2.0, kF32).to(at::kHalf)};
  const auto scaled = scaler.scale(outs);
  ASSERT_EQ(scaled.size(), outs.size());
  for (size_t i = 0; i < outs.size(); ++i)  // 64 is a power of two, so out * 64 is exact in every dtype
    EXPECT_TRUE(SameBits(scaled[i], outs[i] * scaler.scale_tensor()))
        << "output " << i << " " << test::describe(outs[i]);
  EXPECT_EQ(scaled[1].scalar_type(), at::kBFloat16) << "a 0-dim float32 scale does not promote a bfloat16 output";
}

// ShardedGradScaler's rule: the found_inf of a sharded optimizer is reduced across ranks before step() decides. A
// reducer standing in for the all-reduce (MAX over "another rank" that found an inf) makes a rank whose own grads are
// finite skip, on the plain and on the fused path; without a reducer the same rank steps.
TEST(GradScaler, FoundInfReducerMakesAFiniteShardSkip) {
  int calls = 0;
  auto other_rank_found_inf = [&](at::Tensor& found_inf) {
    ++calls;
    found_inf.fill_(1.0);
  };
  for (bool reduce : {false, true}) {
    GradScaler scaler(c10::DeviceType::CPU, Options(1024.0));
    if (reduce) scaler.set_found_inf_reducer(other_rank_found_inf);
    at::Tensor p = Param(at::full({2}, 1.0, kF32));
    Sgd opt({p}, 0.1);
    scaler.scale(at::ones({}, kF32));
    EXPECT_EQ(scaler.step(opt), !reduce);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), reduce ? 512.0 : 1024.0);
    EXPECT_EQ(p[0].item<float>() == 0.0f, reduce);  // skipped: untouched
    RecordingFusedOptimizer fused({Param(at::full({2}, 1.0, kF32))});
    scaler.scale(at::ones({}, kF32));
    scaler.step(fused);
    EXPECT_EQ(fused.found_inf_.item<float>(), reduce ? 1.0f : 0.0f);
  }
  EXPECT_EQ(calls, 2);  // once per inf check: unscale_ on the plain path, the check on the fused one
}

}  // namespace
}  // namespace ampcheck::amp
