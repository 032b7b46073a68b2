// "Scaling case" runs, the end-to-end GradScaler tests of PyTorch's test_torch.py (_run_scaling_case and friends)
// ported to ATen: a two-layer Linear(8, 8) model trained for 4 batches with SGD through GradScaler (init scale 128,
// growth 2, interval 1) while an inf is planted in one grad at iteration 2, next to an unscaled control model that
// skips that iteration's step by hand. The final scale must be 128 * 2^unskipped * 0.5^skipped and the params must
// match the control's. Variants: plain, clipping the scaled grads, clipping after a separate unscale_, gradient
// accumulation over two batches, and two models with two optimizers sharing one scaler. Each runs with the scaler
// enabled and disabled (disabled: the same user code must train like the control, scale 1).
#include <ATen/ATen.h>
#include <ampcheck/amp/grad_scaler.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "amp_test_support.h"

namespace ampcheck::amp {
namespace {

using test::AllClose;
using test::SameBits;
using test::Sgd;
using test::TwoLinear;

constexpr int kSkipIter = 2;  // _create_scaling_case's skip_iter
constexpr double kInit = 128.0, kGrowth = 2.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Batch {
  at::Tensor input, target;
};

std::vector<Batch> MakeData() {  // _create_scaling_case: 4 batches of randn(8, 8) pairs
  at::Generator gen = at::detail::createCPUGenerator(20240611);
  std::vector<Batch> data;
  for (int i = 0; i < 4; ++i) data.push_back({at::randn({8, 8}, gen), at::randn({8, 8}, gen)});
  return data;
}

// torch.nn.utils.clip_grad_norm_(params, max_norm) with norm type 2 (the per-tensor path).
void ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& p : params) norms.push_back(at::linalg_vector_norm(p.grad(), 2));
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  const at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (const auto& p : params) p.grad().mul_(coef);
}

void PlantInf(const TwoLinear& m) {
  at::NoGradGuard no_grad;
  m.w1.grad().fill_(kInf);  // model[1].weight.grad.fill_(inf)
}

// run(data, model, optimizer, scaler, try_scaling_api) as in the PyTorch tests.
using Run = std::function<void(const std::vector<Batch>&, const TwoLinear&, Sgd&, GradScaler&, bool)>;

// _run_scaling_case. Tolerance: params are compared bit for bit unless `tolerance` is set. The scale is a power of
// two, which commutes with every float rounding on the way (no overflow or underflow at these magnitudes), so
// scaled-then-unscaled grads equal the control's exactly; only clipping the *scaled* grads differs, because its 1e-6
// added to the norm is not scaled (PyTorch allows atol 1e-5 there).
void RunScalingCase(const Run& run, int unskipped, int skipped, c10::optional<double> tolerance = c10::nullopt) {
  for (bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "scaler enabled" : "scaler disabled");
    const std::vector<Batch> data = MakeData();
    const TwoLinear control = TwoLinear::make(1), scaling = control.copy();
    Sgd opt_control(control.params(), 1.0), opt_scaling(scaling.params(), 1.0);
    GradScalerOptions o{kInit, kGrowth, 0.5, 1, enabled};
    GradScaler scaler(at::kCPU, o);
    run(data, control, opt_control, scaler, false);
    run(data, scaling, opt_scaling, scaler, true);
    if (enabled)
      EXPECT_EQ(scaler.get_scale(), kInit * std::pow(kGrowth, unskipped) * std::pow(0.5, skipped)) << "final scale";
    else
      EXPECT_EQ(scaler.get_scale(), 1.0) << "final scale";
    const auto c = control.params(), s = scaling.params();
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_EQ(s[i].grad().defined(), c[i].grad().defined()) << "grad of param " << i << " defined";
      if (!c[i].grad().defined()) {  // zero_grad() (set_to_none) ended the run: compare params only
        EXPECT_TRUE(SameBits(s[i], c[i])) << "param " << i;
      } else if (tolerance) {
        EXPECT_TRUE(AllClose(s[i].grad(), c[i].grad(), 1e-5, *tolerance)) << "grad of param " << i;
        EXPECT_TRUE(AllClose(s[i], c[i], 1e-5, *tolerance)) << "param " << i;
      } else {
        EXPECT_TRUE(SameBits(s[i].grad(), c[i].grad())) << "grad of param " << i;
        EXPECT_TRUE(SameBits(s[i], c[i])) << "param " << i;
      }
    }
  }
}

TEST(GradScaler, ScalingCasePlainMatchesControlThatSkipsByHand) {
  RunScalingCase(
      [](const std::vector<Batch>& data, const TwoLinear& model, Sgd& opt, GradScaler& scaler, bool scaling) {
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          model.zero_grad();
          const at::Tensor loss = at::mse_loss(model.forward(data[i].input), data[i].target);
          if (scaling) {
            scaler.scale(loss).backward();
            if (i == kSkipIter && scaler.is_enabled()) PlantInf(model);
            const bool stepped = scaler.step(opt);
            EXPECT_EQ(stepped, !(i == kSkipIter && scaler.is_enabled())) << "iteration " << i;
            scaler.update();
          } else {
            loss.backward();
            if (!scaler.is_enabled() || i != kSkipIter) opt.step();
          }
        }
      },
      /*unskipped=*/3, /*skipped=*/1);
}

TEST(GradScaler, ScalingCaseClippingScaledGrads) {
  RunScalingCase(
      [](const std::vector<Batch>& data, const TwoLinear& model, Sgd& opt, GradScaler& scaler, bool scaling) {
        const double max_norm = 0.2;  // PyTorch's value: small enough that clipping acts
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          model.zero_grad();
          const at::Tensor loss = at::mse_loss(model.forward(data[i].input), data[i].target);
          if (scaling) {
            scaler.scale(loss).backward();
            ClipGradNorm(model.params(), max_norm * scaler.get_scale());
            if (i == kSkipIter && scaler.is_enabled()) PlantInf(model);
            scaler.step(opt);
            scaler.update();
          } else {
            loss.backward();
            ClipGradNorm(model.params(), max_norm);
            if (!scaler.is_enabled() || i != kSkipIter) opt.step();
          }
        }
      },
      3, 1, /*tolerance=*/1e-5);
}

TEST(GradScaler, ScalingCaseClippingAfterSeparateUnscale) {
  RunScalingCase(
      [](const std::vector<Batch>& data, const TwoLinear& model, Sgd& opt, GradScaler& scaler, bool scaling) {
        const double max_norm = 0.2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          model.zero_grad();
          const at::Tensor loss = at::mse_loss(model.forward(data[i].input), data[i].target);
          if (scaling) {
            scaler.scale(loss).backward();
            if (i == kSkipIter && scaler.is_enabled()) PlantInf(model);
            scaler.unscale_(opt);
            ClipGradNorm(model.params(), max_norm);  // on unscaled grads (inf ones become nan: skipped anyway)
            scaler.step(opt);
            scaler.update();
          } else {
            loss.backward();
            ClipGradNorm(model.params(), max_norm);
            if (!scaler.is_enabled() || i != kSkipIter) opt.step();
          }
        }
      },
      3, 1);
}

TEST(GradScaler, ScalingCaseGradientAccumulation) {
  RunScalingCase(
      [](const std::vector<Batch>& data, const TwoLinear& model, Sgd& opt, GradScaler& scaler, bool scaling) {
        const int iters_to_accumulate = 2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          const at::Tensor loss = at::mse_loss(model.forward(data[i].input), data[i].target) / iters_to_accumulate;
          if (scaling) scaler.scale(loss).backward();
          else
            loss.backward();
          if ((i + 1) % iters_to_accumulate == 0) {
            if (scaling) {
              scaler.step(opt);
              scaler.update();
            } else {
              opt.step();
            }
            model.zero_grad();
          }
        }
      },
      /*unskipped=*/2, /*skipped=*/0);
}

// test_grad_scaling_multiple: two models, two optimizers, two losses, one scaler; optimizer 0 is unscaled
// separately; the inf lands in model 1 only, so only optimizer 1 skips -- but the scale still backs off.
TEST(GradScaler, ScalingCaseTwoModelsTwoOptimizersShareOneScaler) {
  for (bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "scaler enabled" : "scaler disabled");
    const std::vector<Batch> data = MakeData();
    const TwoLinear control0 = TwoLinear::make(1), scaling0 = control0.copy();
    const TwoLinear control1 = TwoLinear::make(2), scaling1 = control1.copy();
    Sgd opt_c0(control0.params(), 1.0), opt_s0(scaling0.params(), 1.0);
    Sgd opt_c1(control1.params(), 1.0), opt_s1(scaling1.params(), 1.0);
    GradScaler scaler(at::kCPU, GradScalerOptions{kInit, kGrowth, 0.5, 1, enabled});

    auto run = [&](const TwoLinear& m0, const TwoLinear& m1, Sgd& o0, Sgd& o1, bool scaling) {
      for (int i = 0; i < static_cast<int>(data.size()); ++i) {
        m0.zero_grad();
        m1.zero_grad();
        const at::Tensor out0 = m0.forward(data[i].input), out1 = m1.forward(data[i].input);
        const at::Tensor loss0 = at::mse_loss(0.3 * out0 + 0.7 * out1, data[i].target);
        const at::Tensor loss1 = at::mse_loss(0.6 * out0 - 0.4 * out1, data[i].target);
        if (scaling) {
          scaler.scale(loss0).backward({}, /*retain_graph=*/true);
          scaler.scale(loss1).backward();
          if (i == kSkipIter && scaler.is_enabled()) PlantInf(m1);
          scaler.unscale_(o0);
          EXPECT_TRUE(scaler.step(o0)) << "iteration " << i << ": optimizer 0 has finite grads";
          scaler.step(o1);
          scaler.update();
        } else {
          loss0.backward({}, /*retain_graph=*/true);
          loss1.backward();
          o0.step();
          if (!scaler.is_enabled() || i != kSkipIter) o1.step();
        }
      }
    };
    run(control0, control1, opt_c0, opt_c1, false);
    run(scaling0, scaling1, opt_s0, opt_s1, true);

    EXPECT_EQ(scaler.get_scale(), enabled ? kInit * std::pow(kGrowth, 3) * 0.5 : 1.0) << "final scale";
    const auto c0 = control0.params(), s0 = scaling0.params(), c1 = control1.params(), s1 = scaling1.params();
    // Bit-exact for the power-of-two reason given at RunScalingCase.
    for (size_t i = 0; i < c0.size(); ++i) EXPECT_TRUE(SameBits(s0[i], c0[i])) << "model 0 param " << i;
    for (size_t i = 0; i < c1.size(); ++i) EXPECT_TRUE(SameBits(s1[i], c1[i])) << "model 1 param " << i;
  }
}

}  // namespace
}  // namespace ampcheck::amp
