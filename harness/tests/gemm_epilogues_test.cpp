// The engine option model.gemm_epilogues (kernels/gemm_epilogues.h). On the CPU, where the reference runs: the
// functions are the stock ops, the option's training run is the stock one, the scenario field. On a GPU: the
// cuBLASLt path against the stock ops in bf16 and fp16 (forward and every gradient), the GELU derivative it applies
// (tanh's, not erf's), the bias and fp32 weight gradients against float64.
#include "test_support.h"

#include "kernels/gemm_epilogues.h"
#include "models/model.h"
#include "scenario/scenario.h"

#include <ampcheck/amp/autocast.h>

#include <optional>

using namespace ampcheck;

namespace {

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

struct Grads {
  at::Tensor y, dx, dw_fc, db_fc, dw_proj, db_proj;
};

// the GPT MLP x (B, T, K) -> (B, T, K) through the option's function or the stock ops, then backward of Σ y · up
Grads run_mlp(bool epilogues, at::ScalarType autocast_dtype, at::Device dev, int64_t K = 64, int64_t H = 256,
              int64_t rows = 96) {
  at::manual_seed(11);
  const auto o = at::TensorOptions().device(dev);
  at::Tensor x = at::randn({2, rows / 2, K}, o).requires_grad_(true);
  at::Tensor w_fc = (at::randn({H, K}, o) * 0.1).requires_grad_(true),
             b_fc = (at::randn({H}, o) * 0.1).requires_grad_(true);
  at::Tensor w_pr = (at::randn({K, H}, o) * 0.05).requires_grad_(true),
             b_pr = (at::randn({K}, o) * 0.1).requires_grad_(true);
  at::Tensor up = at::randn({2, rows / 2, K}, o);
  at::Tensor y;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast_dtype != at::kFloat) ac.emplace(dev.type(), autocast_dtype);
    y = epilogues ? kernels::mlp_gelu_epilogues(x, w_fc, b_fc, w_pr, b_pr)
                  : at::linear(at::gelu(at::linear(x, w_fc, b_fc), "tanh"), w_pr, b_pr);
  }
  (y.to(at::kFloat) * up).sum().backward();
  return {y.detach(), x.grad(), w_fc.grad(), b_fc.grad(), w_pr.grad(), b_pr.grad()};
}

// Where cuBLASLt does not run (the CPU) the functions are the stock ops: bit-identical values and gradients.
TEST(GemmEpilogues, OnTheCpuTheyAreTheStockOps) {
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const Grads s = run_mlp(false, dt, at::kCPU), e = run_mlp(true, dt, at::kCPU);
    for (auto [a, b, what] : {std::tuple{&e.y, &s.y, "y"},
                              {&e.dx, &s.dx, "dx"},
                              {&e.dw_fc, &s.dw_fc, "dw_fc"},
                              {&e.db_fc, &s.db_fc, "db_fc"},
                              {&e.dw_proj, &s.dw_proj, "dw_proj"},
                              {&e.db_proj, &s.db_proj, "db_proj"}})
      EXPECT_TRUE(at::equal(*a, *b)) << c10::toString(dt) << " " << what;
    at::Tensor x = at::randn({5, 16}), w = at::randn({24, 16}), b = at::randn({24});
    EXPECT_TRUE(at::equal(kernels::linear_epilogues(x, w, b), at::linear(x, w, b)));
    EXPECT_FALSE(kernels::gemm_epilogues_apply(x, w)) << "a CPU tensor";
  }
}

// The reference of the fp32 weight gradient: gᵀ x in fp32, written or added.
TEST(GemmEpilogues, Fp32WeightGradientReference) {
  at::Tensor g = at::randn({40, 24}).to(at::kBFloat16), x = at::randn({40, 16}).to(at::kBFloat16);
  at::Tensor want = at::mm(g.t().to(at::kFloat), x.to(at::kFloat));
  at::Tensor dw = at::full({24, 16}, 7.0);
  kernels::wgrad_fp32_(dw, g, x, /*accumulate=*/false);
  EXPECT_TRUE(at::allclose(dw, want, 1e-6, 1e-6));
  kernels::wgrad_fp32_(dw, g, x, /*accumulate=*/true);
  EXPECT_TRUE(at::allclose(dw, want * 2, 1e-6, 1e-6));
  at::Tensor bad = at::zeros({24, 16}, at::kDouble);
  EXPECT_THROW(kernels::wgrad_fp32_(bad, g, x, false), c10::Error);
  EXPECT_THROW(kernels::mlp_gelu_epilogues(at::randn({3, 8}), at::randn({5, 8}), at::randn({5}), at::randn({8, 4}),
                                           at::randn({8})),
               c10::Error);
}

// With the option, a training run on the CPU is the stock one (the references run): equal losses.
TEST(GemmEpilogues, TrainingRunOnTheCpuIsTheStockOne) {
  engine::RunConfig a = ampcheck::testing::micro_run("bf16-autocast", 6), b = a;
  b.model.gemm_epilogues = true;
  EXPECT_EQ(ampcheck::testing::cpu_losses(a), ampcheck::testing::cpu_losses(b));
}

TEST(GemmEpilogues, ScenarioField) {
  ampcheck::testing::expect_gpt_only_model_flag(
      "gemm_epilogues", [](const scenario::Scenario& sc) { return sc.run.model.gemm_epilogues; });
}

bool lt_here() { return at::hasCUDA() && kernels::gemm_epilogues_built(); }

// The cuBLASLt path against the stock ops on the GPU, GPT-2's MLP widths (768 -> 3072 -> 768, 2048 rows): the
// forward (the stock ops) and every gradient within 3 ulps of the compute dtype in norm (relative 2^-8 · 3 in bf16,
// 2^-11 · 3 in fp16): the products are the same, GELU's derivative is applied before rounding instead of after (one
// rounding less per element, cuBLASLt's tanh), the bias gradients are summed in another order, and in bf16 the
// weight gradients are not rounded to bf16. The gradients keep their parameters' dtypes (fp32).
TEST(CudaKernels, GemmEpiloguesMatchTheStockOps) {
  if (!lt_here()) GTEST_SKIP() << "no CUDA device, or cuBLASLt not linked (see doctor)";
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const double tol = 3.0 * (dt == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048);
    const Grads s = run_mlp(false, dt, at::kCUDA, 768, 3072, 2048), e = run_mlp(true, dt, at::kCUDA, 768, 3072, 2048);
    ASSERT_EQ(e.y.scalar_type(), s.y.scalar_type());
    for (auto [a, b, what] : {std::tuple{&e.y, &s.y, "y"},
                              {&e.dx, &s.dx, "dx"},
                              {&e.dw_fc, &s.dw_fc, "dw_fc"},
                              {&e.db_fc, &s.db_fc, "db_fc"},
                              {&e.dw_proj, &s.dw_proj, "dw_proj"},
                              {&e.db_proj, &s.db_proj, "db_proj"}}) {
      EXPECT_EQ(a->scalar_type(), b->scalar_type()) << c10::toString(dt) << " " << what;
      EXPECT_LT(rel(*a, *b), tol) << c10::toString(dt) << " " << what;
    }
  }
  // a Linear with bias (c_attn's widths): forward bit-identical (the same addmm), gradients as above
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    at::manual_seed(2);
    const auto o = at::TensorOptions().device(at::kCUDA);
    at::Tensor x0 = at::randn({4, 256, 768}, o), w0 = at::randn({2304, 768}, o) * 0.05, b0 = at::randn({2304}, o);
    at::Tensor up = at::randn({4, 256, 2304}, o);
    std::vector<at::Tensor> got[2];
    for (int e = 0; e < 2; ++e) {
      at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
                 b = b0.clone().requires_grad_(true);
      at::Tensor y;
      {
        amp::AutocastGuard ac(at::kCUDA, dt);
        y = e ? kernels::linear_epilogues(x, w, b) : at::linear(x, w, b);
      }
      (y.to(at::kFloat) * up).sum().backward();
      got[e] = {y.detach(), x.grad(), w.grad(), b.grad()};
    }
    const double tol = 3.0 * (dt == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048);
    EXPECT_TRUE(at::equal(got[1][0], got[0][0])) << c10::toString(dt) << " forward";
    const char* names[] = {"y", "dx", "dw", "db"};
    for (int i = 1; i < 4; ++i) {
      EXPECT_EQ(got[1][i].scalar_type(), at::kFloat) << names[i];
      EXPECT_LT(rel(got[1][i], got[0][i]), tol) << c10::toString(dt) << " " << names[i];
    }
  }
}

// The GELU derivative the c_proj input-gradient GEMM applies (DGELU) is the tanh approximation's, as the model's
// GELU (not erf's): with both Linears the identity and no biases, the MLP's input gradient for an upstream gradient
// of ones is GELU'(x) itself, rounded to fp16. On x in [-4, -1] the two derivatives differ by up to 8.7e-4 (at
// x = -2.02, where the derivative is -0.084: 0.8 % — eight fp16 ulps), so: within 2 fp16 ulps + 1e-4 of tanh's (the
// epilogue's derivative was measured 6.5e-5 off at its worst on the H200 — a fast tanh —, still 13 times below
// the erf gap), and nearer tanh's than erf's in the largest difference.
TEST(CudaKernels, GemmEpilogueGeluDerivativeIsTheTanhApproximation) {
  if (!lt_here()) GTEST_SKIP() << "no CUDA device, or cuBLASLt not linked (see doctor)";
  const auto o = at::TensorOptions().device(at::kCUDA);
  const int64_t H = 256;
  at::Tensor x = at::linspace(-4, -1, 64 * H, o).reshape({64, H}).to(at::kHalf).to(at::kFloat).requires_grad_(true);
  at::Tensor eye = at::eye(H, o), zero = at::zeros({H}, o);
  {
    amp::AutocastGuard ac(at::kCUDA, at::kHalf);
    at::Tensor y = kernels::mlp_gelu_epilogues(x, eye, zero, eye, zero);
    y.backward(at::ones_like(y));
  }
  at::Tensor xd = x.detach().to(at::kDouble), ones = at::ones_like(xd);
  at::Tensor d_tanh = at::gelu_backward(ones, xd, "tanh"), d_erf = at::gelu_backward(ones, xd, "none");
  at::Tensor got = x.grad().to(at::kDouble);
  const double to_tanh = (got - d_tanh).abs().max().item<double>(), to_erf = (got - d_erf).abs().max().item<double>();
  EXPECT_TRUE(((got - d_tanh).abs() <= d_tanh.abs() * (2.0 / 1024) + 1e-4).all().item<bool>()) << "max " << to_tanh;
  EXPECT_LT(to_tanh, to_erf);
}

// The fp32 weight gradient and the bias gradient against float64: relative to the sum of absolute terms, 1e-5 (fp32
// accumulation over 4096 rows: the order differs, the terms are exact products of bf16 values); accumulate adds to
// what dw holds.
TEST(CudaKernels, GemmEpilogueGradientsAgainstFloat64) {
  if (!lt_here()) GTEST_SKIP() << "no CUDA device, or cuBLASLt not linked (see doctor)";
  at::manual_seed(6);
  const auto o = at::TensorOptions().device(at::kCUDA);
  at::Tensor g = at::randn({4096, 2304}, o).to(at::kBFloat16), x = at::randn({4096, 768}, o).to(at::kBFloat16);
  at::Tensor gd = g.to(at::kDouble), xd = x.to(at::kDouble);
  at::Tensor want = at::mm(gd.t(), xd), bound = at::mm(gd.abs().t(), xd.abs()) * 1e-5 + 1e-30;
  at::Tensor dw = at::empty({2304, 768}, o.dtype(at::kFloat));
  kernels::wgrad_fp32_(dw, g, x, /*accumulate=*/false);
  EXPECT_TRUE(((dw.to(at::kDouble) - want).abs() <= bound).all().item<bool>());
  kernels::wgrad_fp32_(dw, g, x, /*accumulate=*/true);
  EXPECT_TRUE(((dw.to(at::kDouble) - 2 * want).abs() <= 2 * bound).all().item<bool>());
  // the Linear's backward: db = Σ rows of g, dw = gᵀ x, both fp32 under bf16 autocast
  at::Tensor xr = x.to(at::kFloat).requires_grad_(true), w = at::randn({2304, 768}, o).requires_grad_(true);
  at::Tensor b = at::zeros({2304}, o).requires_grad_(true);
  {
    amp::AutocastGuard ac(at::kCUDA, at::kBFloat16);
    at::Tensor y = kernels::linear_epilogues(xr, w, b);
    y.backward(g);
  }
  // (the bias gradient is rounded through bf16 as the stock sum: half a bf16 ulp more)
  at::Tensor db_want = gd.sum(0), db_bound = gd.abs().sum(0) * 1e-5 + db_want.abs() / 256 + 1e-30;
  EXPECT_TRUE(((b.grad().to(at::kDouble) - db_want).abs() <= db_bound).all().item<bool>())
      << "max " << (b.grad().to(at::kDouble) - db_want).abs().max().item<double>();
  EXPECT_TRUE(((w.grad().to(at::kDouble) - want).abs() <= bound).all().item<bool>());
}

}  // namespace

namespace {
// The option is wired: on a GPU under bf16 autocast, with it the GPT's loss graph holds the epilogue functions — one
// per block for c_attn and attn c_proj each (LinearEpiloguesFn) and one per block for the MLP (MlpEpiloguesFn) —
// without it none.
TEST(CudaKernels, GemmEpiloguesOptionPutsTheirFunctionsInTheGraph) {
  if (!lt_here()) GTEST_SKIP() << "no CUDA device, or cuBLASLt not linked (see doctor)";
  for (bool on : {false, true}) {
    models::ModelConfig mc;
    mc.kind = "gpt";
    mc.preset = "micro";
    mc.gemm_epilogues = on;
    mc = models::resolve_preset(mc);
    auto model = models::make_model(mc);
    model->to(at::Device(at::kCUDA, 0), at::kFloat);
    at::Tensor tokens = at::randint(mc.vocab_size, {2, 16}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
    at::Tensor loss;
    {
      amp::AutocastGuard ac(at::kCUDA, at::kBFloat16);
      loss = model->loss(tokens, tokens);
    }
    const auto counts = ampcheck::testing::count_graph_nodes(loss, {"LinearEpiloguesFn", "MlpEpiloguesFn"});
    const int linear = counts[0], mlp = counts[1];
    EXPECT_EQ(linear, on ? 2 * mc.n_layer : 0) << (on ? "on" : "off");
    EXPECT_EQ(mlp, on ? mc.n_layer : 0) << (on ? "on" : "off");
  }
}
}  // namespace
