// The chunked head + cross-entropy engine option (models/head_loss) against the stock path (at::linear +
// at::cross_entropy_loss): loss and gradients in fp32, under bf16 autocast and under fp16 autocast with a loss scale,
// on several chunk sizes (one that does not divide the rows), and a whole training run.
#include "test_support.h"

#include "models/head_loss.h"
#include "scenario/scenario.h"

#include <ampcheck/amp/autocast.h>

#include <optional>

using namespace ampcheck;

namespace {

struct Grads {
  at::Tensor loss, dx, dw;
};

Grads run(bool chunked, at::ScalarType autocast_dtype, double scale, int64_t chunk_rows) {
  at::manual_seed(7);
  const int64_t N = 100, C = 32, V = 96;
  at::Tensor x = at::randn({N, C}).requires_grad_(true);
  at::Tensor w = (at::randn({V, C}) * 0.5).requires_grad_(true);
  at::Tensor t = at::randint(V, {N}, at::kLong);
  at::Tensor loss;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast_dtype != at::kFloat) ac.emplace(c10::DeviceType::CPU, autocast_dtype);
    loss = chunked ? models::chunked_head_cross_entropy(x, w, t, chunk_rows)
                   : at::cross_entropy_loss(at::linear(x, w), t);
  }
  (loss * scale).backward();
  return {loss.detach(), x.grad(), w.grad()};
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

// fp32: the same function up to summation order — 1e-6 relative.
TEST(HeadLoss, ChunkedMatchesStockInFp32) {
  const auto stock = run(false, at::kFloat, 1.0, 0);
  for (int64_t rows : {0, 7, 32, 100}) {
    const auto c = run(true, at::kFloat, 1.0, rows);
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
TEST(HeadLoss, ChunkedMatchesStockUnderAutocast) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const double scale = dt == at::kHalf ? 65536.0 : 1.0;
    const auto stock = run(false, dt, scale, 0);
    const auto c = run(true, dt, scale, 32);
    EXPECT_LT(rel(c.loss, stock.loss), 1.0 / 64) << c10::toString(dt);
    EXPECT_LT(rel(c.dx, stock.dx), 0.02) << c10::toString(dt);
    EXPECT_LT(rel(c.dw, stock.dw), 0.02) << c10::toString(dt);
    const auto exact = run(false, at::kFloat, scale, 0);
    EXPECT_LT(rel(c.dw, exact.dw), 0.05) << c10::toString(dt) << ": far from the fp32 gradient";
    EXPECT_GT(rel(c.dx, exact.dx), 1e-4) << c10::toString(dt) << ": as exact as fp32, autocast did not apply";
  }
}

// A whole micro run: the chunked head trains like the stock one (fp32: within 1e-5 relative at every step).
TEST(HeadLoss, TrainingRunTracksTheStockHead) {
  engine::RunConfig a = ampcheck::testing::micro_run("fp32", 10), b = a;
  b.model.head_loss = "chunked";
  b.model.head_chunk_rows = 48;
  engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
  ta.run();
  tb.run();
  for (int64_t s = 0; s < 10; ++s) {
    const double la = ta.trajectory().rows[s][engine::kLoss], lb = tb.trajectory().rows[s][engine::kLoss];
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << s;
  }
}

TEST(HeadLoss, ScenarioFieldAndItsConflictWithAnFp8Head) {
  const std::string base = "name: t\nwhy: w\ndata: {batch_size: 8, seq_len: 32}\n";
  const auto sc = scenario::parse_scenario(base + "model: {kind: gpt, preset: micro, head_loss: chunked}\nstrategy: fp32\n",
                                           "scenarios/t.yaml");
  EXPECT_EQ(sc.run.model.head_loss, "chunked");
  try {
    scenario::parse_scenario(base + "model: {kind: gpt, preset: micro, head_loss: chunked}\n"
                                    "strategy: {preset: fp8, fp8: {layers: blocks+head}}\n", "scenarios/t.yaml");
    FAIL() << "chunked head with an FP8 head accepted";
  } catch (const scenario::ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_loss: chunked computes the LM head itself"), std::string::npos) << e.what();
  }
}

}  // namespace
