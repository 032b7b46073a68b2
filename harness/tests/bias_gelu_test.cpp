// The engine option model.fused_bias_gelu (kernels::linear_bias_gelu, kernels::bias_grad): the Linear + GELU
// function against the stock ops (at::linear, at::gelu) on the CPU — where the reference runs — in fp32 and under
// bf16 autocast; whole training runs with the option against stock ones; and — on a GPU — the column-sum / GELU
// backward kernel against its ATen reference over the dtypes and the vector / scalar paths.
#include "test_support.h"

#include "kernels/fused.h"
#include "models/model.h"
#include "scenario/scenario.h"

#include <ampcheck/amp/autocast.h>

#include <optional>

using namespace ampcheck;

namespace {

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

struct Out {
  at::Tensor y, dx, dw, db;
};

Out run_linear(bool fused, bool gelu, at::ScalarType autocast_dtype, at::Device dev) {
  at::manual_seed(5);
  at::Tensor x = at::randn({4, 25, 48}).to(dev).requires_grad_(true);
  at::Tensor w = (at::randn({72, 48}) * 0.2).to(dev).requires_grad_(true);
  at::Tensor b = (at::randn({72}) * 0.1).to(dev).requires_grad_(true);
  at::Tensor up = at::randn({4, 25, 72}).to(dev);
  at::Tensor y;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast_dtype != at::kFloat) ac.emplace(dev.type(), autocast_dtype);
    y = fused ? kernels::linear_bias_gelu(x, w, b, gelu)
              : (gelu ? at::gelu(at::linear(x, w, b), "tanh") : at::linear(x, w, b));
  }
  (y.to(at::kFloat) * up).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// The forward is the stock ops' (the same addmm and gelu: bit-identical); the gradients come from the same GEMMs and
// the same ATen sum on the CPU, so they agree to summation order: 1e-6 relative in fp32; under bf16 autocast the
// operands are the same bf16 tensors, the GEMM outputs rounded to bf16 as stock — 1e-2 relative (about two bf16 ulps).
TEST(FusedBiasGelu, MatchesTheStockOpsOnTheCpu) {
  for (bool gelu : {true, false})
    for (auto dt : {at::kFloat, at::kBFloat16}) {
      const std::string what = std::string(gelu ? "gelu " : "linear ") + c10::toString(dt);
      const Out s = run_linear(false, gelu, dt, at::kCPU), f = run_linear(true, gelu, dt, at::kCPU);
      ASSERT_EQ(f.y.scalar_type(), s.y.scalar_type()) << what;
      EXPECT_TRUE(at::equal(f.y, s.y)) << what << ": forward";
      const double tol = dt == at::kFloat ? 1e-6 : 1e-2;
      EXPECT_EQ(f.dx.scalar_type(), at::kFloat) << what;
      EXPECT_EQ(f.db.scalar_type(), at::kFloat) << what;
      EXPECT_LT(rel(f.dx, s.dx), tol) << what << ": dx";
      EXPECT_LT(rel(f.dw, s.dw), tol) << what << ": dw";
      EXPECT_LT(rel(f.db, s.db), tol) << what << ": db";
    }
}

TEST(FusedBiasGelu, RejectsMismatchedShapes) {
  at::Tensor x = at::randn({3, 8}), w = at::randn({5, 8}), b = at::randn({4});
  EXPECT_THROW(kernels::linear_bias_gelu(x, w, b, true), c10::Error);
  EXPECT_THROW(kernels::bias_grad(at::randn({3, 4}), at::randn({3, 5})), c10::Error);
}

// A training run with the option tracks the stock one: on the CPU the same ops up to the order of the GEMM
// gradients' sums, so over 8 steps of micro the losses agree within 1e-5 relative in fp32 and 1e-2 in bf16 autocast
// (a bf16 rounding that falls the other way compounds over steps).
TEST(FusedBiasGelu, TrainingRunTracksTheStockPath) {
  for (const char* strategy : {"fp32", "bf16-autocast"}) {
    engine::RunConfig a = ampcheck::testing::micro_run(strategy, 8), b = a;
    b.model.fused_bias_gelu = true;
    const auto la = ampcheck::testing::cpu_losses(a), lb = ampcheck::testing::cpu_losses(b);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    const double tol = std::string(strategy) == "fp32" ? 1e-5 : 1e-2;
    for (size_t s = 0; s < 8; ++s) EXPECT_NEAR(lb[s], la[s], tol * std::abs(la[s])) << strategy << " step " << s;
  }
}

// The option is wired: with it, the GPT's loss graph holds one fused Linear per block Linear (4 per block: c_attn,
// attn c_proj, c_fc with its GELU, mlp c_proj); without it, none.
TEST(FusedBiasGelu, OptionPutsTheFusedLinearInTheGraph) {
  for (bool on : {false, true}) {
    models::ModelConfig mc;
    mc.kind = "gpt";
    mc.preset = "micro";
    mc.fused_bias_gelu = on;
    mc = models::resolve_preset(mc);
    auto model = models::make_model(mc);
    at::Tensor tokens = at::randint(mc.vocab_size, {2, 16}, at::kLong);
    at::Tensor loss = model->loss(tokens, tokens);
    const int fused = ampcheck::testing::count_graph_nodes(loss, {"LinearBiasGeluFn"})[0];
    EXPECT_EQ(fused, on ? 4 * mc.n_layer : 0) << (on ? "on" : "off");
  }
}

TEST(FusedBiasGelu, ScenarioField) {
  ampcheck::testing::expect_gpt_only_model_flag(
      "fused_bias_gelu", [](const scenario::Scenario& sc) { return sc.run.model.fused_bias_gelu; });
}

// The CUDA kernel against its reference (ATen's gelu_backward, then sum(0) in the dtype): the GELU gradient within one
// ulp of its dtype (the same formula; tanhf and the final rounding may differ by one), the column sums — fp32 sums
// in another order, rounded through the dtype — within 1e-5 of the column's sum of |g|, plus the column's sum of the
// elements' differences, plus one ulp of the dtype. Shapes: GPT-2's c_fc (rows × 3072), c_attn (2304), a width that
// takes the scalar path (not a multiple of the vector), and a row count that does not divide into the blocks.
TEST(CudaKernels, BiasGradMatchesItsReference) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16})
    for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{4096, 3072}, {1000, 2304}, {777, 37}, {16384, 768}})
      for (bool gelu : {true, false}) {
        const auto [R, C] = shape;
        const std::string what =
            std::string(c10::toString(dt)) + " " + std::to_string(R) + "x" + std::to_string(C) + (gelu ? " gelu" : "");
        at::manual_seed(3);
        at::Tensor g = (at::randn({R, C}, cuda) * 0.01).to(dt), pre = (at::randn({R, C}, cuda) * 2).to(dt);
        auto [s_ref, d_ref] = kernels::bias_grad(g, gelu ? pre : at::Tensor(), kernels::Impl::Reference);
        auto [s, d] = kernels::bias_grad(g, gelu ? pre : at::Tensor(), kernels::Impl::Auto);
        ASSERT_EQ(d.scalar_type(), dt) << what;
        const double ulp = dt == at::kFloat ? 1.0 / (1 << 22) : dt == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
        at::Tensor dd = (d.to(at::kFloat) - d_ref.to(at::kFloat)).abs();
        EXPECT_TRUE((dd <= d_ref.to(at::kFloat).abs() * ulp + 1e-30).all().item<bool>())
            << what << ": gelu grad off by " << dd.max().item<double>();
        at::Tensor bound = d_ref.to(at::kFloat).abs().sum(0) * 1e-5 + dd.sum(0) + s_ref.abs() * ulp + 1e-30;
        at::Tensor ds = (s - s_ref).abs();
        EXPECT_TRUE((ds <= bound).all().item<bool>()) << what << ": sums off by " << ds.max().item<double>();
      }
}

}  // namespace
