// EnginePlan: each requested engine option applied or refused with its reason, decided once from the run's config,
// device and build; the trainer and the reports read the plan.
#include "engine/engine_plan.h"
#include "engine/trainer.h"
#include "kernels/gemm_epilogues.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace ampcheck {
namespace {

engine::RunConfig fast(engine::RunConfig cfg) {  // what `--engine fast` requests for a GPT
  cfg.loop.cuda_graphs = cfg.loop.fused_grad_check = cfg.loop.fused_param_norm = true;
  cfg.model.head_loss = models::HeadLoss::Fused;
  cfg.model.fused_layernorm = cfg.model.fused_bias_gelu = cfg.model.gemm_epilogues = true;
  return cfg;
}

const engine::OptionDecision& decision(const engine::EnginePlan& p, const std::string& option) {
  const engine::OptionDecision* d = p.find(option);
  EXPECT_NE(d, nullptr) << option;
  static const engine::OptionDecision none;
  return d ? *d : none;
}

TEST(EnginePlan, NothingRequestedIsStock) {
  const auto plan = engine::resolve_engine_plan(testing::micro_run("bf16-autocast"), at::Device("cpu"), false);
  EXPECT_TRUE(plan.decisions.empty());
  EXPECT_EQ(plan.describe(), "stock");
  EXPECT_EQ(plan.model.head_loss, models::HeadLoss::Stock);
  EXPECT_EQ(plan.model.compute_dtype, at::kBFloat16);  // the strategy's autocast dtype, for the fused ops
  EXPECT_FALSE(plan.cuda_graphs || plan.fused_grad_check || plan.param_norm_from_optimizer);
}

TEST(EnginePlan, OnTheCpuNoGpuOnlyOptionApplies) {
  const auto plan = engine::resolve_engine_plan(fast(testing::micro_run("bf16-autocast")), at::Device("cpu"), false);
  ASSERT_EQ(plan.decisions.size(), 7u);
  const auto& gemm = decision(plan, "model.gemm_epilogues");
  EXPECT_FALSE(gemm.applied);
  EXPECT_EQ(gemm.note, "needs a CUDA device: the run is on cpu");
  EXPECT_FALSE(plan.model.gemm_epilogues);
  const auto& graphs = decision(plan, "train.cuda_graphs");
  EXPECT_FALSE(graphs.applied);
  EXPECT_NE(graphs.note.find("CUDA"), std::string::npos) << graphs.note;
  EXPECT_FALSE(plan.cuda_graphs);
  // the restructured ops run (on their ATen references, which the report says)
  for (const char* o : {"model.head_loss", "model.fused_layernorm", "model.fused_bias_gelu", "train.fused_grad_check",
                        "train.fused_param_norm"}) {
    EXPECT_TRUE(decision(plan, o).applied) << o;
    EXPECT_NE(decision(plan, o).note.find("ATen reference"), std::string::npos) << o;
  }
  EXPECT_EQ(plan.model.head_loss, models::HeadLoss::Fused);
  EXPECT_TRUE(plan.model.fused_layernorm && plan.model.fused_bias_gelu);
  // no scaler, no clipping: the gradient norm comes from AdamW's pass too
  EXPECT_TRUE(plan.param_norm_from_optimizer && plan.grad_norm_from_optimizer);
  const std::string d = plan.describe();
  const std::string applied = d.substr(0, d.find("not applied:"));
  EXPECT_EQ(applied.find("GEMM epilogues"), std::string::npos) << d;
  EXPECT_EQ(applied.find("cuda graphs"), std::string::npos) << d;
  EXPECT_NE(d.find("not applied: GEMM epilogues (needs a CUDA device: the run is on cpu)"), std::string::npos) << d;
}

TEST(EnginePlan, RefusalsNameTheReason) {
  {  // fp16 params + fp32 masters: AdamW steps the masters; no autocast: no GEMM epilogues; fp16 residual stream
    const auto plan = engine::resolve_engine_plan(fast(testing::micro_run("fp16-master")), at::Device("cpu"), false);
    EXPECT_FALSE(plan.param_norm_from_optimizer);
    EXPECT_EQ(decision(plan, "train.fused_param_norm").note,
              "AdamW steps fp32 master copies, not the model's parameters");
    EXPECT_FALSE(decision(plan, "model.fused_layernorm").applied);
    EXPECT_NE(decision(plan, "model.fused_layernorm").note.find("the residual stream is fp16"), std::string::npos)
        << decision(plan, "model.fused_layernorm").note;
    // a GradScaler: the grad norm cannot come from AdamW's read of the (scaled) grads
    EXPECT_FALSE(plan.grad_norm_from_optimizer);
  }
  {  // pure bf16: AdamW sums fp32 parameters only
    const auto plan = engine::resolve_engine_plan(fast(testing::micro_run("bf16-pure")), at::Device("cpu"), false);
    EXPECT_FALSE(plan.param_norm_from_optimizer);
    EXPECT_NE(decision(plan, "train.fused_param_norm").note.find("fp32 parameters only"), std::string::npos);
  }
  {  // data parallel: the gradient sync runs around the step; CUDA graphs not captured
    const auto plan = engine::resolve_engine_plan(fast(testing::micro_run("bf16-autocast")), at::Device("cpu"), true);
    EXPECT_EQ(decision(plan, "train.fused_param_norm").note, "the gradient sync runs around the optimizer step");
  }
  {  // an MLP has no GPT head or blocks
    engine::RunConfig cfg = testing::micro_run("fp32");
    cfg.model.kind = "mlp";
    cfg.model.preset = "tiny";
    cfg.model.fused_layernorm = true;
    const auto plan = engine::resolve_engine_plan(cfg, at::Device("cpu"), false);
    EXPECT_FALSE(plan.model.fused_layernorm);
    EXPECT_NE(decision(plan, "model.fused_layernorm").note.find("only the GPT"), std::string::npos);
  }
  {  // the fused grad check's pass stands for the scaler's inf check only where nothing sits between them
    engine::RunConfig cfg = fast(testing::micro_run("fp16-autocast"));
    cfg.optimizer.fused = true;
    EXPECT_TRUE(engine::resolve_engine_plan(cfg, at::Device("cpu"), false).inf_check_from_probe);
    cfg.loop.clip_max_norm = 1.0;
    EXPECT_FALSE(engine::resolve_engine_plan(cfg, at::Device("cpu"), false).inf_check_from_probe);
  }
}

// GEMM epilogues on a CUDA device (the plan needs no GPU to be resolved): they take the GEMMs in the dtype the model
// computes in — autocast's, or the parameters' for a model cast whole to fp16 / bf16 —, not fp32; with FP8 blocks only
// the fused LM head's weight gradient.
TEST(EnginePlan, GemmEpiloguesFollowTheComputeDtype) {
  if (!kernels::gemm_epilogues_built()) GTEST_SKIP() << "this build has no cuBLASLt";
  const at::Device cuda("cuda");
  auto gemm = [&](engine::RunConfig cfg) {
    const auto plan = engine::resolve_engine_plan(cfg, cuda, false);
    return std::make_pair(plan.model.gemm_epilogues, decision(plan, "model.gemm_epilogues").note);
  };
  EXPECT_TRUE(gemm(fast(testing::micro_run("bf16-autocast"))).first);
  EXPECT_TRUE(gemm(fast(testing::micro_run("fp16-master"))).first);  // fp16 parameters, no autocast
  EXPECT_TRUE(gemm(fast(testing::micro_run("bf16-pure"))).first);
  const auto fp32 = gemm(fast(testing::micro_run("fp32")));
  EXPECT_FALSE(fp32.first);
  EXPECT_EQ(fp32.second, "needs bf16 or fp16 compute (autocast or parameters): the strategy computes in fp32");
  engine::RunConfig fp8 = fast(testing::micro_run("fp8"));
  const auto head = gemm(fp8);
  EXPECT_TRUE(head.first);
  EXPECT_NE(head.second.find("LM head's weight gradient only"), std::string::npos) << head.second;
  fp8.model.head_loss = models::HeadLoss::Stock;
  EXPECT_FALSE(gemm(fp8).first);
}

TEST(EnginePlan, TheTrainerReportsThePlanItRan) {
  engine::RunConfig cfg = fast(testing::micro_run("bf16-autocast", 3));
  engine::Trainer t(cfg, at::Device("cpu"));
  ASSERT_EQ(t.run().status, engine::RunOutcome::Status::Completed);
  const engine::EnginePlan p = t.plan();
  EXPECT_EQ(p.describe(), engine::resolve_engine_plan(cfg, at::Device("cpu"), false).describe());
  EXPECT_EQ(t.cuda_graphs_status().rfind("uncaptured: ", 0), 0u) << t.cuda_graphs_status();
}

}  // namespace
}  // namespace ampcheck
