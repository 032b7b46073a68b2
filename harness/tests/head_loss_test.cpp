// The chunked and fused head + cross-entropy engine options (models/head_loss) against the stock path (at::linear +
// at::cross_entropy_loss): loss and gradients in fp32, under bf16 autocast and under fp16 autocast with a loss scale,
// on several chunk sizes (one that does not divide the rows), and whole training runs; the fused head's row kernel
// (kernels::cross_entropy_rows_) against the stock loss, its ignore_index and out-of-range rows, and — on a GPU —
// its CUDA C++ kernel against its ATen reference.
#include "test_support.h"

#include "kernels/fused.h"
#include "models/head_loss.h"
#include "scenario/scenario.h"

#include <ampcheck/amp/autocast.h>

#include <optional>

using namespace ampcheck;

namespace {

struct Grads {
  at::Tensor loss, dx, dw;
};

enum class Head { Stock, Chunked, Fused };

// hint: what the fused head is told backward will bring (< 0: the real scale)
Grads run(Head head, at::ScalarType autocast_dtype, double scale, int64_t chunk_rows, double hint = -1,
          at::Device dev = at::kCPU) {
  at::manual_seed(7);
  const int64_t N = 100, C = 32, V = 96;
  at::Tensor x = at::randn({N, C}).to(dev).requires_grad_(true);
  at::Tensor w = (at::randn({V, C}) * 0.5).to(dev).requires_grad_(true);
  at::Tensor t = at::randint(V, {N}, at::kLong).to(dev);
  at::Tensor loss;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast_dtype != at::kFloat) ac.emplace(dev.type(), autocast_dtype);
    if (head == Head::Chunked) loss = models::chunked_head_cross_entropy(x, w, t, chunk_rows);
    else if (head == Head::Fused)
      loss = models::fused_head_cross_entropy(x, w, t, chunk_rows, at::full({}, hint < 0 ? scale : hint, x.options()));
    else
      loss = at::cross_entropy_loss(at::linear(x, w), t);
  }
  (loss * scale).backward();
  return {loss.detach(), x.grad(), w.grad()};
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

// fp32: the same function up to summation order — 1e-6 relative.
TEST(HeadLoss, ChunkedAndFusedMatchStockInFp32) {
  const auto stock = run(Head::Stock, at::kFloat, 1.0, 0);
  for (auto head : {Head::Chunked, Head::Fused})
    for (int64_t rows : {0, 7, 32, 100}) {
      const auto c = run(head, at::kFloat, 1.0, rows);
      EXPECT_LT(rel(c.loss, stock.loss), 1e-6) << rows;
      EXPECT_LT(rel(c.dx, stock.dx), 1e-6) << rows;
      EXPECT_LT(rel(c.dw, stock.dw), 1e-6) << rows;
      EXPECT_EQ(c.dx.scalar_type(), at::kFloat);
      EXPECT_EQ(c.dw.scalar_type(), at::kFloat);
    }
}

// Under autocast the logits and their gradient are rounded to bf16 / fp16 in both paths; the chunked wgrad is rounded
// once per chunk instead of once: within 2 ulps of bf16 (2^-7) for the loss and dgrad, 2% for wgrad. fp16 with a
// loss scale of 65536: the scale reaches the gradient before its cast to fp16, as in the stock path (no underflow).
TEST(HeadLoss, ChunkedAndFusedMatchStockUnderAutocast) {
  for (auto head : {Head::Chunked, Head::Fused})
    for (auto dt : {at::kBFloat16, at::kHalf}) {
      const double scale = dt == at::kHalf ? 65536.0 : 1.0;
      const auto stock = run(Head::Stock, dt, scale, 0);
      const auto c = run(head, dt, scale, 32);
      EXPECT_LT(rel(c.loss, stock.loss), 1.0 / 64) << c10::toString(dt);
      EXPECT_LT(rel(c.dx, stock.dx), 0.02) << c10::toString(dt);
      EXPECT_LT(rel(c.dw, stock.dw), 0.02) << c10::toString(dt);
      const auto exact = run(Head::Stock, at::kFloat, scale, 0);
      EXPECT_LT(rel(c.dw, exact.dw), 0.05) << c10::toString(dt) << ": far from the fp32 gradient";
      EXPECT_GT(rel(c.dx, exact.dx), 1e-4) << c10::toString(dt) << ": as exact as fp32, autocast did not apply";
    }
}

// The fused head computes its gradient at the hinted scale: told 1 while backward brings 65536 (fp16), the
// grad_logits (p − y)/N underflow in fp16 where the stock path's (p − y)·65536/N do not — the hint is what keeps the
// fused head faithful to the stock path's fp16 range, and this shows it matters (the trainer passes the real scale).
TEST(HeadLoss, FusedHeadTakesItsFp16RangeFromTheHint) {
  const auto stock = run(Head::Stock, at::kHalf, 65536.0, 0);
  const auto right = run(Head::Fused, at::kHalf, 65536.0, 0);
  const auto unhinted = run(Head::Fused, at::kHalf, 65536.0, 0, /*hint=*/1.0);
  EXPECT_LT(rel(right.dw, stock.dw), 0.02);
  EXPECT_GT(rel(unhinted.dw, stock.dw), 2 * rel(right.dw, stock.dw)) << "an unhinted fp16 gradient lost nothing";
}

// The row kernel's contract against the stock loss, with ignored rows (target -100: loss and gradient 0) and an
// out-of-range target (that row NaN, the others untouched).
TEST(HeadLoss, CrossEntropyRowsContract) {
  at::manual_seed(3);
  at::Tensor logits = at::randn({6, 11}) * 3;
  at::Tensor t = at::tensor({4, -100, 0, 10, 20, 2}, at::kLong);
  at::Tensor g = logits.clone(), row = at::empty({6}), factor = at::full({}, 0.5);
  kernels::cross_entropy_rows_(g, t, row, factor, -100, kernels::Impl::Reference);
  for (int64_t r : {0, 2, 3, 5}) {
    at::Tensor lr = logits[r].unsqueeze(0).requires_grad_(true);
    at::Tensor l = at::cross_entropy_loss(lr, t.narrow(0, r, 1));
    l.backward();
    EXPECT_NEAR(row[r].item<double>(), l.item<double>(), 1e-5) << r;
    EXPECT_LT((g[r] - lr.grad()[0] * 0.5).abs().max().item<double>(), 1e-6) << r;
  }
  EXPECT_EQ(row[1].item<double>(), 0.0);
  EXPECT_EQ(g[1].abs().max().item<double>(), 0.0);
  EXPECT_TRUE(std::isnan(row[4].item<double>()));
  EXPECT_TRUE(g[4].isnan().all().item<bool>());
}

// On a GPU: the CUDA C++ row kernels (fp16 / bf16 rows held in shared memory, fp32 rows read twice) against their
// ATen reference, fp32 / fp16 / bf16, vocabularies that are and are not a multiple of the vector width (scalar tail),
// strided rows, a row of -inf but one logit; loss within 1e-5 relative (fp32 sums in another
// order, __expf), gradient within one ulp of its dtype (it is rounded once in both) plus 1e-6 absolute. And the fused
// head on CUDA against the stock head under bf16 autocast, as on the CPU.
TEST(CudaKernels, CrossEntropyRowsMatchTheirReference) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  at::manual_seed(5);
  for (int64_t V : {50304, 1001, 50257})
    for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
      // 50257 (GPT-2's vocabulary) as the fused head's rows: a view of 50304-wide rows, one element of scalar tail
      at::Tensor logits = V == 50257 ? (at::randn({64, 50304}, at::kCUDA) * 4).to(dt).narrow(1, 0, V)
                                     : (at::randn({64, V}, at::kCUDA) * 4).to(dt);
      if (V == 50257) logits.select(0, 7).fill_(-std::numeric_limits<double>::infinity()).index_put_({1}, 2.0);
      at::Tensor t = at::randint(V, {64}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
      t[3] = -100;
      if (V == 50257) t[7] = 1;  // the -inf row's one finite logit (a -inf target logit would make both losses inf)
      at::Tensor factor = at::full({}, 1.0 / 64, at::TensorOptions().device(at::kCUDA));
      auto like = [&] {
        return V == 50257 ? logits.contiguous().new_empty({64, 50304}).narrow(1, 0, V).copy_(logits) : logits.clone();
      };
      at::Tensor a = like(), b = like();
      at::Tensor ra = at::empty({64}, factor.options()), rb = at::empty({64}, factor.options());
      kernels::cross_entropy_rows_(a, t, ra, factor, -100, kernels::Impl::Auto);
      kernels::cross_entropy_rows_(b, t, rb, factor, -100, kernels::Impl::Reference);
      EXPECT_LT(rel(ra, rb), 1e-5) << V << " " << c10::toString(dt);
      const double ulp = dt == at::kFloat ? 1e-6 : dt == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
      at::Tensor diff = (a.to(at::kFloat) - b.to(at::kFloat)).abs();
      at::Tensor allowed = b.to(at::kFloat).abs() * ulp + 1e-6;
      EXPECT_TRUE((diff <= allowed).all().item<bool>())
          << V << " " << c10::toString(dt) << ": worst " << (diff - allowed).max().item<double>();
    }
  const auto stock = run(Head::Stock, at::kBFloat16, 1.0, 0, -1, at::kCUDA);
  const auto fused = run(Head::Fused, at::kBFloat16, 1.0, 32, -1, at::kCUDA);
  EXPECT_LT(rel(fused.loss, stock.loss), 1.0 / 64);
  EXPECT_LT(rel(fused.dx, stock.dx), 0.02);
  EXPECT_LT(rel(fused.dw, stock.dw), 0.02);
}

// Whole micro runs: the chunked and fused heads train like the stock one (fp32: within 1e-5 relative at every step).
TEST(HeadLoss, TrainingRunTracksTheStockHead) {
  for (const char* head : {"chunked", "fused"}) {
    engine::RunConfig a = ampcheck::testing::micro_run("fp32", 10), b = a;
    b.model.head_loss = models::parse_head_loss(head);
    b.model.head_chunk_rows = 48;
    engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
    const auto oa = ta.run(), ob = tb.run();
    ASSERT_EQ(oa.status, engine::RunOutcome::Status::Completed) << oa.error;
    ASSERT_EQ(ob.status, engine::RunOutcome::Status::Completed) << head << ": " << ob.error;
    for (int64_t s = 0; s < 10; ++s) {
      const double la = ta.trajectory().rows[s][trajectory::kLoss], lb = tb.trajectory().rows[s][trajectory::kLoss];
      EXPECT_NEAR(lb, la, 1e-5 * la) << head << " step " << s;
    }
  }
}

// fp16 autocast with the dynamic GradScaler through the trainer (which hints the fused head with the scale): the
// fused head's run stays within 1% of the stock head's loss at every step and skips the same steps.
TEST(HeadLoss, Fp16ScaledTrainingRunTracksTheStockHead) {
  engine::RunConfig a = ampcheck::testing::micro_run("fp16-autocast", 10), b = a;
  b.model.head_loss = models::HeadLoss::Fused;
  engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
  const auto oa = ta.run(), ob = tb.run();
  ASSERT_EQ(oa.status, engine::RunOutcome::Status::Completed) << oa.error;
  ASSERT_EQ(ob.status, engine::RunOutcome::Status::Completed) << ob.error;
  for (int64_t s = 0; s < 10; ++s) {
    const double la = ta.trajectory().rows[s][trajectory::kLoss], lb = tb.trajectory().rows[s][trajectory::kLoss];
    EXPECT_NEAR(lb, la, 1e-2 * la) << "step " << s;
    EXPECT_EQ(tb.trajectory().rows[s][trajectory::kSkipped], ta.trajectory().rows[s][trajectory::kSkipped])
        << "step " << s;
  }
}

// What the trainer tells the fused head backward will bring: the GradScaler's scale, times a planted loss-scale
// factor on the steps it fires, divided by the micro-batches (the loss is divided) — and 1 (undefined) without a
// scaler. Were the planted factor left out, the fused head would form its fp16 gradient at the scale alone and keep
// values the stock head flushes: on GPT-2 the planted underflow's margin fell from 12.1 to 3.33 that way
// (docs/TOLERANCE.md). FusedHeadTakesItsFp16RangeFromTheHint shows the hint decides the flush.
TEST(HeadLoss, TrainerHintsTheFusedHeadWithWhatBackwardBrings) {
  engine::RunConfig c = ampcheck::testing::micro_run("fp16-autocast", 6);
  c.model.head_loss = models::HeadLoss::Fused;
  c.loop.micro_batches = 2;
  inject::InjectionConfig u = ampcheck::testing::underflow_injection(3, 1e-5);
  u.steps.clear();
  u.from_step = 3;
  ampcheck::inject::set_injections(c, {u});
  engine::Trainer t(c, at::kCPU);
  EXPECT_DOUBLE_EQ(t.loss_grad_scale(0).item<double>(), 65536.0 / 2);  // before the scale exists: the initial one
  t.run_until(3);
  const double scale = t.scaler()->scale_tensor().item<double>();
  EXPECT_DOUBLE_EQ(t.loss_grad_scale(2).item<double>(), scale / 2);
  EXPECT_NEAR(t.loss_grad_scale(3).item<double>(), scale * 1e-5 / 2, scale * 1e-5 / 2 * 1e-6);
  engine::Trainer plain(ampcheck::testing::micro_run("bf16-autocast", 2), at::kCPU);
  EXPECT_FALSE(plain.loss_grad_scale(0).defined());
}

TEST(HeadLoss, ScenarioFieldAndItsConflictWithAnFp8Head) {
  const std::string base = "name: t\nwhy: w\ndata: {batch_size: 8, seq_len: 32}\n";
  const auto sc = scenario::parse_scenario(
      base + "model: {kind: gpt, preset: micro, head_loss: chunked}\nstrategy: fp32\n", "scenarios/t.yaml");
  EXPECT_EQ(sc.run.model.head_loss, models::HeadLoss::Chunked);
  try {
    scenario::parse_scenario(base +
                                 "model: {kind: gpt, preset: micro, head_loss: chunked}\n"
                                 "strategy: {preset: fp8, fp8: {layers: blocks+head}}\n",
                             "scenarios/t.yaml");
    FAIL() << "chunked head with an FP8 head accepted";
  } catch (const scenario::ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_loss: chunked computes the LM head itself"), std::string::npos)
        << e.what();
  }
}

}  // namespace

namespace {

// The fused residual add + LayerNorm (kernels::add_layer_norm) on a GPU against its reference (the stock ATen ops):
// s exactly (the same fp32 add), h within one ulp of its dtype, and the gradients of x, y, γ, β — fp32 sums in
// another order — within 1e-4 relative (y's, rounded to its dtype, within one ulp of it); with and without y;
// C = 768 (GPT-2, 8192 rows: more than one row per warp), 1024, 384 (the backward's vector path), 64 and 160 (its
// scalar path), 288 (neither: the reference runs both sides); every pair of dtypes (the kernel takes y in fp32 or the
// output's dtype, the others go to the reference). With y, y's bias (y_bias) takes its gradient from the backward: the
// column sums of y's gradient — fp32 sums in another order, rounded through y's dtype — within one ulp of y's dtype of
// the reference's (the stock sum) plus 1e-5 of the column's Σ|dy|.
TEST(CudaKernels, AddLayerNormMatchesTheStockOps) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (int64_t C : {768, 1024, 384, 64, 160, 288})
    for (auto ydt : {at::kFloat, at::kHalf, at::kBFloat16})
      for (auto odt : {at::kFloat, at::kHalf, at::kBFloat16})
        for (bool has_y : {true, false}) {
          const std::string what =
              std::to_string(C) + " y " + c10::toString(ydt) + " out " + c10::toString(odt) + (has_y ? "" : " no y");
          at::manual_seed(11);
          const std::vector<int64_t> shape =
              C == 768 ? std::vector<int64_t>{8, 1024, C} : std::vector<int64_t>{3, 100, C};
          at::Tensor x0 = at::randn(shape, cuda) * 2 + 0.5, y0 = at::randn(shape, cuda).to(ydt);
          at::Tensor g0 = at::randn({C}, cuda) * 0.1 + 1, b0 = at::randn({C}, cuda) * 0.1;
          at::Tensor ds_up = at::randn(shape, cuda), dh_up = at::randn(shape, cuda).to(odt);
          std::vector<at::Tensor> got[2];
          for (int impl = 0; impl < 2; ++impl) {
            at::Tensor x = x0.clone().requires_grad_(true), y = y0.clone().requires_grad_(true);
            at::Tensor g = g0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
            at::Tensor yb = at::zeros({C}, cuda).requires_grad_(true);
            auto [s, h] = kernels::add_layer_norm(x, has_y ? y : at::Tensor(), g, b, 1e-5, odt,
                                                  impl == 0 ? kernels::Impl::Auto : kernels::Impl::Reference,
                                                  has_y ? yb : at::Tensor());
            ASSERT_EQ(h.scalar_type(), odt) << what;
            ((s * ds_up).sum() + (h.to(at::kFloat) * dh_up.to(at::kFloat)).sum()).backward();
            got[impl] = {s.detach(),
                         h.detach(),
                         x.grad(),
                         has_y ? y.grad() : at::zeros({1}, cuda),
                         g.grad(),
                         b.grad(),
                         has_y ? yb.grad() : at::zeros({1}, cuda)};
          }
          EXPECT_TRUE(at::equal(got[0][0], got[1][0])) << what << ": s";
          const double ulp_h = odt == at::kFloat ? 1e-5 : odt == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
          at::Tensor hd = (got[0][1].to(at::kFloat) - got[1][1].to(at::kFloat)).abs();
          EXPECT_TRUE((hd <= got[1][1].to(at::kFloat).abs() * ulp_h + 1e-5).all().item<bool>())
              << what << ": h off by " << hd.max().item<double>();
          EXPECT_LT(rel(got[0][2], got[1][2]), 1e-4) << what << ": dx";
          if (has_y)
            EXPECT_LT(rel(got[0][3], got[1][3]), ydt == at::kFloat  ? 1e-4
                                                 : ydt == at::kHalf ? 2e-3
                                                                    : 1e-2)
                << what << ": dy";
          EXPECT_LT(rel(got[0][4], got[1][4]), 1e-4) << what << ": dgamma";
          EXPECT_LT(rel(got[0][5], got[1][5]), 1e-4) << what << ": dbeta";
          if (has_y) {
            const double ulp_y = ydt == at::kFloat ? 1.2e-7 : ydt == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
            at::Tensor col_abs = got[1][3].to(at::kFloat).abs().reshape({-1, C}).sum(0);
            at::Tensor bd = (got[0][6] - got[1][6]).abs();
            EXPECT_TRUE((bd <= got[1][6].abs() * ulp_y + col_abs * 1e-5).all().item<bool>())
                << what << ": y's bias off by " << bd.max().item<double>();
          }
        }
}

// y_bias on the CPU (the reference): the branch Linear run with its bias detached and the bias handed to the add
// gives, bit for bit, the stock gradients — the bias's is the stock sum of the Linear's output gradient — in fp32 and
// under bf16 autocast.
TEST(HeadLoss, AddLayerNormTakesTheBranchBiasGradient) {
  for (bool autocast : {false, true}) {
    at::manual_seed(5);
    const int64_t C = 64, K = 32;
    at::Tensor x0 = at::randn({3, 50, C}), in0 = at::randn({3, 50, K}), w0 = at::randn({C, K}) * 0.2,
               b0 = at::randn({C}) * 0.1, ds_up = at::randn({3, 50, C}), dh_up = at::randn({3, 50, C});
    at::Tensor g0 = at::randn({C}) * 0.1 + 1, be0 = at::randn({C}) * 0.1;
    std::vector<at::Tensor> got[2];
    for (int routed = 0; routed < 2; ++routed) {
      at::Tensor x = x0.clone().requires_grad_(true), in = in0.clone().requires_grad_(true),
                 w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true),
                 g = g0.clone().requires_grad_(true), be = be0.clone().requires_grad_(true);
      std::optional<amp::AutocastGuard> ac;
      if (autocast) ac.emplace(at::kCPU, at::kBFloat16);
      const at::ScalarType out = autocast ? at::kBFloat16 : at::kFloat;
      at::Tensor y = at::linear(in, w, routed ? b.detach() : b);
      auto [s, h] = kernels::add_layer_norm(x, y, g, be, 1e-5, out, kernels::Impl::Auto, routed ? b : at::Tensor());
      ac.reset();
      ((s * ds_up).sum() + (h.to(at::kFloat) * dh_up).sum()).backward();
      got[routed] = {s.detach(), h.detach(), x.grad(), in.grad(), w.grad(), b.grad(), g.grad(), be.grad()};
    }
    for (size_t i = 0; i < got[0].size(); ++i)
      EXPECT_TRUE(at::equal(got[0][i], got[1][i])) << "tensor " << i << (autocast ? " (bf16 autocast)" : " (fp32)");
    EXPECT_EQ(got[1][5].scalar_type(), at::kFloat);
  }
  at::Tensor x = at::randn({2, 4, 8}), y = at::randn({2, 4, 8});
  EXPECT_THROW(kernels::add_layer_norm(x, y, at::ones({8}), at::zeros({8}), 1e-5, at::kFloat, kernels::Impl::Auto,
                                       at::zeros({7})),
               c10::Error);
  EXPECT_THROW(kernels::add_layer_norm(x, at::Tensor(), at::ones({8}), at::zeros({8}), 1e-5, at::kFloat,
                                       kernels::Impl::Auto, at::zeros({8})),
               c10::Error);
}

// On the CPU the option runs the reference — the stock ops in the stock order — so a run is bit-identical to the
// stock one (bf16 autocast and fp32).
TEST(HeadLoss, FusedLayerNormOptionOnTheCpuIsTheStockPath) {
  for (const char* strategy : {"bf16-autocast", "fp32"}) {
    engine::RunConfig a = ampcheck::testing::micro_run(strategy, 6), b = a;
    b.model.fused_layernorm = true;
    const auto la = ampcheck::testing::cpu_losses(a), lb = ampcheck::testing::cpu_losses(b);
    ASSERT_EQ(la.size(), 6u);
    EXPECT_EQ(lb, la) << strategy;
  }
}

}  // namespace
