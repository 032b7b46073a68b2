// The engine option train.cuda_graphs (engine/step_graph.h). On the CPU: a run that asks for graphs where they
// cannot hold runs uncaptured, trains exactly as without the option, and says why. On a GPU (CudaGraphs.*): a
// captured run trains like the uncaptured one — bf16 autocast, fp16 autocast with the dynamic GradScaler on the fused
// AdamW (skipped steps decided on the device, the scale backing off inside the graph), probe and plain steps as two
// graphs, the fused head together with graphs — and the graphs really replayed.
#include "test_support.h"

#include "engine/step_graph.h"

using namespace ampcheck;

namespace {

void expect_same_losses(const engine::Trainer& a, const engine::Trainer& b, double rel_tol, const std::string& what) {
  ASSERT_EQ(a.trajectory().size(), b.trajectory().size()) << what;
  for (int64_t s = 0; s < a.trajectory().size(); ++s) {
    const auto &ra = a.trajectory().rows[s], &rb = b.trajectory().rows[s];
    EXPECT_NEAR(rb[trajectory::kLoss], ra[trajectory::kLoss], rel_tol * std::abs(ra[trajectory::kLoss]))
        << what << " step " << s;
    EXPECT_EQ(rb[trajectory::kSkipped], ra[trajectory::kSkipped]) << what << " step " << s;
    EXPECT_EQ(rb[trajectory::kLossScale], ra[trajectory::kLossScale]) << what << " step " << s;
  }
}

TEST(StepGraphs, RefusedOnTheCpuTheRunSaysWhyAndTrainsAsWithout) {
  engine::RunConfig a = ampcheck::testing::micro_run("bf16-autocast", 6), b = a;
  b.loop.cuda_graphs = true;
  engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
  ta.run();
  tb.run();
  EXPECT_EQ(ta.cuda_graphs_status(), "");
  EXPECT_EQ(tb.cuda_graphs_status().rfind("uncaptured: ", 0), 0u) << tb.cuda_graphs_status();
  expect_same_losses(ta, tb, 0.0, "uncaptured");
}

TEST(StepGraphs, WhyNotNamesTheHostDecision) {
  const at::Device cuda(at::kCUDA, 0);
  engine::RunConfig c = ampcheck::testing::micro_run("fp16-autocast", 6);
  c.optimizer.fused = false;
  // (a build without CUDA headers refuses everything for that reason first)
  const std::string why = engine::StepGraphs::why_not(c, cuda, false);
  EXPECT_TRUE(why.find("non-fused optimizer") != std::string::npos || why.find("this build") != std::string::npos)
      << why;
  c.optimizer.fused = true;
  ampcheck::inject::add_injections(c, {ampcheck::testing::grad_injection(3, 1e30, "*", 1)});
  const std::string why2 = engine::StepGraphs::why_not(c, cuda, false);
  EXPECT_TRUE(why2.find("planted events") != std::string::npos || why2.find("this build") != std::string::npos) << why2;
  EXPECT_NE(engine::StepGraphs::why_not(ampcheck::testing::micro_run("bf16-autocast", 6), at::kCPU, false), "");
}

// nano on the GPU, 24 steps, probes every 5 (two kinds of step, two graphs). The captured run replays the same
// kernels in the same order; it differs from the uncaptured one only by AdamW reading its learning rate from a
// float32 tensor instead of a host double — losses within 1e-4 relative, skips and loss scales identical.
engine::RunConfig gpu_run(const std::string& strategy) {
  engine::RunConfig c = ampcheck::testing::micro_run(strategy, 24);
  c.model.preset = "nano";
  c.data.batch_size = 8;
  c.data.seq_len = 64;
  c.loop.probe_every = 5;
  c.optimizer.fused = true;
  return c;
}

TEST(CudaGraphs, CapturedRunTracksTheUncapturedOne) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const std::string strategy : {"bf16-autocast", "fp16-autocast"}) {
    for (const std::string head : {"stock", "fused"}) {
      engine::RunConfig a = gpu_run(strategy), b = a;
      a.model.head_loss = b.model.head_loss = models::parse_head_loss(head);
      b.loop.cuda_graphs = true;
      if (strategy == "fp16-autocast")
        a.strategy.scaler.init_scale = b.strategy.scaler.init_scale = 4294967296.0;  // 2^32: the first steps overflow
      engine::Trainer ta(a, at::Device(at::kCUDA, 0)), tb(b, at::Device(at::kCUDA, 0));
      const auto oa = ta.run(), ob = tb.run();
      ASSERT_EQ(ob.status, engine::RunOutcome::Status::Completed) << ob.error;
      ASSERT_EQ(oa.status, engine::RunOutcome::Status::Completed) << oa.error;
      const std::string what = strategy + " " + head + " head";
      EXPECT_EQ(tb.cuda_graphs_status().rfind("captured: 2 graph(s)", 0), 0u)
          << what << ": " << tb.cuda_graphs_status();
      expect_same_losses(ta, tb, 1e-4, what);
      if (strategy == "fp16-autocast") EXPECT_GT(tb.trajectory().skipped_steps(), 0) << what << ": no step skipped";
      EXPECT_LT(tb.trajectory().rows.back()[trajectory::kLoss], tb.trajectory().rows.front()[trajectory::kLoss])
          << what;
    }
  }
}

// The whole fast path (graphs + fused head + fused residual LayerNorm + fused bias grads / GELU + GEMM epilogues) on
// nano against the stock engine: bf16 and fp16 with the GradScaler, losses within 2% at every step (different rounding
// places in bf16 compound over 24 steps; the suites judge the fast path against FP32 references with the calibrated
// bands), the same skipped steps.
TEST(CudaGraphs, FastPathTracksTheStockEngine) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const std::string strategy : {"bf16-autocast", "fp16-autocast"}) {
    engine::RunConfig a = gpu_run(strategy), b = a;
    b.loop.cuda_graphs = true;
    b.model.head_loss = models::HeadLoss::Fused;
    b.model.fused_layernorm = true;
    b.model.fused_bias_gelu = true;
    b.model.gemm_epilogues = true;
    engine::Trainer ta(a, at::Device(at::kCUDA, 0)), tb(b, at::Device(at::kCUDA, 0));
    const auto oa = ta.run(), ob = tb.run();
    ASSERT_EQ(ob.status, engine::RunOutcome::Status::Completed) << ob.error;
    ASSERT_EQ(oa.status, engine::RunOutcome::Status::Completed) << oa.error;
    for (int64_t s = 0; s < ta.trajectory().size(); ++s) {
      const auto &ra = ta.trajectory().rows[s], &rb = tb.trajectory().rows[s];
      EXPECT_NEAR(rb[trajectory::kLoss], ra[trajectory::kLoss], 0.02 * ra[trajectory::kLoss])
          << strategy << " step " << s;
      EXPECT_EQ(rb[trajectory::kSkipped], ra[trajectory::kSkipped]) << strategy << " step " << s;
    }
  }
}

}  // namespace
