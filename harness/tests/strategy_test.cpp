// The precision strategies on the CPU, end to end through the Trainer: the seed's crash (model.half() + GradScaler),
// the fixes training, determinism, skipped steps under injected overflow (planted in the grads, or a real fp16
// activation overflow at the MLP input), poisoned params without a scaler.
// CUDA twins (suite Cuda*) run the same checks on the GPU machine and skip where there is no GPU.
#include "test_support.h"

#include "engine/device.h"

#include <ampcheck/amp/grad_scaler.h>

#include <iostream>
#include <map>

using ampcheck::amp::GradScalerError;
using namespace ampcheck;
using namespace ampcheck::testing;

namespace {

void expect_half_gradscaler_fails_at_first_step(const at::Device& device) {
  engine::Trainer trainer(micro_run("fp16-pure-scaler"), device);
  ASSERT_EQ(trainer.model().dtype(), at::kHalf) << "the strategy must cast the model like model.half()";
  const auto before = snapshot(trainer.model().parameter_tensors());
  try {
    trainer.train_step(0);
    FAIL() << "step 0 of model.half() + GradScaler did not raise";
  } catch (const GradScalerError& e) {
    EXPECT_STREQ(e.what(), "Attempting to unscale FP16 gradients.");
    EXPECT_EQ(e.python_type(), GradScalerError::PythonType::ValueError);
  }
  expect_params_equal(trainer.model().parameter_tensors(), before, "after the refused step");
}

// Runs `steps` and returns the trajectory; the outcome must be `completed`.
trajectory::Trajectory train(engine::RunConfig cfg, const at::Device& device) {
  engine::Trainer trainer(std::move(cfg), device);
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::Completed) << out.error;
  return trainer.trajectory();
}

// Loss must fall from about ln(V) towards the source's entropy rate: the first step's loss minus the mean of the
// last 10 must exceed `drop` nats (a model that learns nothing stays within ~0.05 of ln V).
void expect_loss_falls(const trajectory::Trajectory& t, double drop, const std::string& what) {
  ASSERT_GE(t.size(), 20);
  double tail = 0;
  for (int64_t i = t.size() - 10; i < t.size(); ++i) tail += t.rows[i][trajectory::kLoss];
  tail /= 10;
  EXPECT_GT(t.rows[0][trajectory::kLoss] - tail, drop)
      << what << ": first loss " << t.rows[0][trajectory::kLoss] << ", mean of the last 10 " << tail;
}

}  // namespace

TEST(StrategyCpu, HalfModelWithGradScalerFailsAtFirstStepWithPyTorchsMessage) {
  expect_half_gradscaler_fails_at_first_step(at::Device(at::kCPU));
}

TEST(StrategyCpu, RunOutcomeOfHalfGradScalerIsErrorAtStepZero) {
  engine::Trainer trainer(micro_run("fp16-pure-scaler"), at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::Error);
  EXPECT_EQ(out.error, "Attempting to unscale FP16 gradients.");
  EXPECT_EQ(out.failed_step, 0);
  EXPECT_EQ(trainer.trajectory().size(), 0) << "no step may be recorded for a refused step";
}

TEST(StrategyCpu, Fp32RunTwiceIsBitIdentical) {
  const auto a = train(micro_run("fp32", 15), at::Device(at::kCPU));
  const auto b = train(micro_run("fp32", 15), at::Device(at::kCPU));
  expect_identical_trajectories(a, b);
}

// The strategies that are correct ways to train (the strategy presets): each must learn.
const char* const kCorrectStrategies[] = {"fp32", "fp16-autocast", "bf16-autocast", "fp16-master", "fp16-static"};

void expect_correct_strategies_learn(const at::Device& device) {
  // 120 steps of micro: fp32 drops ~2 nats here; 1 nat leaves room for each strategy's rounding.
  for (const char* s : kCorrectStrategies) {
    SCOPED_TRACE(s);
    auto cfg = micro_run(s, 120);
    cfg.optimizer.lr = 1e-2;
    expect_loss_falls(train(cfg, device), 1.0, s);
  }
}

// Pure fp16 / bf16 params without master weights are not correct strategies, but they must run to the end with
// finite numbers on a clean problem (their failures are the scenarios' business: stalls, lost updates).
void expect_pure_strategies_run_finite(const at::Device& device) {
  for (const char* s : {"fp16-pure", "bf16-pure"}) {
    SCOPED_TRACE(s);
    auto cfg = micro_run(s, 40);
    const auto t = train(cfg, device);
    EXPECT_TRUE(std::isfinite(t.rows.back()[trajectory::kParamNorm])) << s;
  }
}

TEST(StrategyCpu, EveryCorrectStrategyLearnsMicro) { expect_correct_strategies_learn(at::Device(at::kCPU)); }

TEST(StrategyCpu, PureLowPrecisionParamsRunFinite) { expect_pure_strategies_run_finite(at::Device(at::kCPU)); }

TEST(StrategyCpu, OverflowInjectionSkipsTheStepAndBacksOffTheScale) {
  auto cfg = micro_run("fp16-autocast", 12);
  ampcheck::inject::add_injections(cfg, {grad_injection(5, INFINITY, "h.0.*", 1)});
  const auto t = train(cfg, at::Device(at::kCPU));
  for (int64_t s = 0; s < t.size(); ++s) EXPECT_EQ(t.rows[s][trajectory::kSkipped], s == 5 ? 1.0 : 0.0) << "step " << s;
  // GradScaler's rule: found inf -> scale *= backoff (0.5); growth_interval 2000 means no growth in 12 steps.
  EXPECT_EQ(t.rows[6][trajectory::kLossScale], t.rows[5][trajectory::kLossScale] * 0.5);
  EXPECT_EQ(t.rows[5][trajectory::kUpdateNorm], 0.0) << "a skipped step must leave every parameter untouched";
  EXPECT_GT(t.rows[6][trajectory::kUpdateNorm], 0.0) << "training must resume after the skipped step";
  EXPECT_TRUE(std::isfinite(t.rows.back()[trajectory::kParamNorm]));
}

TEST(StrategyCpu, FusedAdamWTakesScaleAndFoundInfOnDeviceAndSkipsTheSameStep) {
  auto cfg = micro_run("fp16-autocast", 12);
  cfg.optimizer.fused = true;
  ampcheck::inject::add_injections(cfg, {grad_injection(4, NAN, "wte", 3)});
  const auto t = train(cfg, at::Device(at::kCPU));
  for (int64_t s = 0; s < t.size(); ++s) EXPECT_EQ(t.rows[s][trajectory::kSkipped], s == 4 ? 1.0 : 0.0) << "step " << s;
  EXPECT_EQ(t.rows[4][trajectory::kUpdateNorm], 0.0);
}

TEST(StrategyCpu, InfIntoGradsWithoutScalerPoisonsTheParams) {
  auto cfg = micro_run("bf16-autocast", 12);
  ampcheck::inject::add_injections(cfg, {grad_injection(3, INFINITY, "h.0.*", 1)});
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::NonFinite);
  EXPECT_EQ(out.failed_step, 3);
}

TEST(StrategyCpu, UnderflowFlushesFp16GradsToZeroWithoutAScaler) {
  // Loss x 1e-7 pushes every gradient below fp16's smallest subnormal (6e-8) in a .half() model: all grads are 0.
  // (What AdamW's fp16 state then does with zero grads is the scenarios' business; here only the flush matters.)
  auto cfg = micro_run("fp16-pure", 3);
  ampcheck::inject::add_injections(cfg, {underflow_injection(2, 1e-7)});
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  trainer.run_until(3);
  const auto& t = trainer.trajectory();
  EXPECT_LT(t.rows[1][trajectory::kFracZero], 0.01);
  EXPECT_GT(t.rows[2][trajectory::kFracZero], 0.99) << "grads should have flushed to zero at the underflow step";
  EXPECT_EQ(t.rows[2][trajectory::kGradNorm], 0.0);
}

TEST(StrategyCpu, UnderflowDoesNotHurtBf16) {
  // The same loss x 1e-7 in bf16 autocast: bf16 has fp32's exponent range, so grads stay non-zero.
  auto cfg = micro_run("bf16-autocast", 4);
  ampcheck::inject::add_injections(cfg, {underflow_injection(2, 1e-7)});
  const auto t = train(cfg, at::Device(at::kCPU));
  EXPECT_LT(t.rows[2][trajectory::kFracZero], 0.1);
}

TEST(StrategyCpu, UpdateNeverCalledRaisesPyTorchsStepTwiceError) {
  auto cfg = micro_run("fp16-autocast", 3);
  cfg.loop.call_update = false;
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::Error);
  EXPECT_EQ(out.error, "step() has already been called since the last update().");
  EXPECT_EQ(out.failed_step, 1);
}

TEST(StrategyCpu, UnscalePerMicroBatchRaisesPyTorchsUnscaleTwiceError) {
  auto cfg = micro_run("fp16-autocast", 3);
  cfg.loop.micro_batches = 2;
  cfg.loop.unscale_each_micro_batch = true;
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::Error);
  EXPECT_EQ(out.error, "unscale_() has already been called on this optimizer since the last update().");
}

TEST(StrategyCpu, TwoOptimizersShareOneScalerAndSkipIndependently) {
  // PyTorch's GradScaler checks each optimizer's own grads: an inf in the embedding grads skips the embedding
  // optimizer only; the block optimizer steps; update() backs the shared scale off once.
  auto cfg = micro_run("fp16-autocast", 4);
  cfg.loop.two_optimizers = true;
  cfg.loop.aux_loss_weight = 1e-4;
  ampcheck::inject::add_injections(cfg, {grad_injection(3, INFINITY, "wte", 1)});
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  ASSERT_EQ(trainer.optimizers().size(), 2u);
  trainer.run_until(3);
  std::map<std::string, at::Tensor> before;
  for (const auto& p : trainer.model().parameters()) before[p.name] = p.tensor.detach().clone();
  const double scale = trainer.scaler()->get_scale();
  trainer.run_until(4);
  for (const auto& p : trainer.model().parameters()) {
    const bool second_group = p.name.rfind("h.", 0) != 0;
    if (second_group) EXPECT_TRUE(at::equal(p.tensor, before[p.name])) << p.name << " stepped despite the inf";
    if (p.name == "h.0.attn.c_attn.weight")
      EXPECT_FALSE(at::equal(p.tensor, before[p.name])) << p.name << " did not step";
  }
  EXPECT_EQ(trainer.scaler()->get_scale(), scale * 0.5);
  EXPECT_EQ(trainer.trajectory().rows[3][trajectory::kSkipped], 1.0);
}

namespace {
inject::InjectionConfig activation_injection(int64_t step, double factor, models::ActivationSite at) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::ActivationScale;
  c.steps = {step};
  c.factor = factor;
  c.block = 0;
  c.at = at;
  return c;
}

// The injected step's forward overflows: loss non-finite, GradScaler skips it (update norm 0) and backs the scale
// off by 0.5 (growth_interval 2000: no growth within the run); every other step is finite and steps.
void expect_overflow_skipped_once(const trajectory::Trajectory& t, int64_t at_step) {
  for (int64_t s = 0; s < t.size(); ++s) {
    const auto& row = t.rows[s];
    EXPECT_EQ(row[trajectory::kSkipped], s == at_step ? 1.0 : 0.0) << "step " << s << ", skipped";
    if (s == at_step) {
      EXPECT_FALSE(std::isfinite(row[trajectory::kLoss]))
          << "step " << s << ": the fp16 forward should overflow, loss " << row[trajectory::kLoss];
      EXPECT_EQ(row[trajectory::kUpdateNorm], 0.0)
          << "step " << s << ": a skipped step leaves every parameter untouched";
    } else {
      EXPECT_TRUE(std::isfinite(row[trajectory::kLoss])) << "step " << s << ", loss " << row[trajectory::kLoss];
      EXPECT_GT(row[trajectory::kUpdateNorm], 0.0) << "step " << s << ", update_norm";
    }
  }
  EXPECT_EQ(t.rows[at_step + 1][trajectory::kLossScale], 0.5 * t.rows[at_step][trajectory::kLossScale])
      << "scale after the skip";
  EXPECT_TRUE(std::isfinite(t.rows.back()[trajectory::kParamNorm]));
}
}  // namespace

TEST(StrategyCpu, ActivationScaledAtTheMlpInputOverflowsFp16AutocastAndTheStepIsSkipped) {
  // ln_2's output x 1e5 (|x| up to ~3e5 > 65504) feeds c_fc, which autocast runs in fp16: inf in the forward pass.
  auto cfg = micro_run("fp16-autocast", 8);
  ampcheck::inject::add_injections(cfg, {activation_injection(3, 1e5, models::ActivationSite::MlpInput)});
  expect_overflow_skipped_once(train(cfg, at::Device(at::kCPU)), 3);
}

TEST(StrategyCpu, ActivationScaledAtTheMlpInputOverflowsHalfParamsWithMasterWeights) {
  auto cfg = micro_run("fp16-master", 8);
  // 2^16 itself is past fp16's 65504: the default scale makes the fp16 loss's own gradient inf and skips step 0
  cfg.strategy.scaler.init_scale = 1024;
  ampcheck::inject::add_injections(cfg, {activation_injection(3, 1e5, models::ActivationSite::MlpInput)});
  expect_overflow_skipped_once(train(cfg, at::Device(at::kCPU)), 3);
}

TEST(StrategyCpu, ActivationScaledOnTheResidualStreamDoesNotOverflowFp16Autocast) {
  // The same factor on the residual stream: autocast keeps that add in fp32 and the next LayerNorm normalises it,
  // so no fp16 tensor ever holds the large values: nothing is skipped (why `at: mlp_input` exists).
  auto cfg = micro_run("fp16-autocast", 6);
  ampcheck::inject::add_injections(cfg, {activation_injection(3, 1e5, models::ActivationSite::Residual)});
  const auto t = train(cfg, at::Device(at::kCPU));
  for (int64_t s = 0; s < t.size(); ++s) {
    EXPECT_EQ(t.rows[s][trajectory::kSkipped], 0.0) << "step " << s;
    EXPECT_TRUE(std::isfinite(t.rows[s][trajectory::kLoss])) << "step " << s;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA twins: run on the GPU machine (ci/gpu.sh); skipped here.

#define REQUIRE_CUDA() \
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaStrategy, HalfModelWithGradScalerFailsAtFirstStepAndReleasesMemory) {
  REQUIRE_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  // "Memory returns to its level before the scenario", measured from the caching allocator's own counters. The
  // first matmul of a process also leaves ATen's cuBLAS / cuBLASLt workspaces allocated, kept per handle and stream
  // for the life of the process (on the H200 a first failing run in a fresh process left 68,157,440 B, ci/gpu.sh
  // 2026-12-02); they are the library's, not the scenario's, so they are released before both measurements and
  // their size is reported. A second failing run must then leave the allocated bytes where the first left them.
  ASSERT_TRUE(engine::release_library_workspaces(cuda)) << "this build cannot release cuBLAS workspaces";
  engine::synchronize(cuda);
  const auto before = engine::memory_stats(cuda);
  engine::reset_peak_memory(cuda);
  expect_half_gradscaler_fails_at_first_step(cuda);
  engine::synchronize(cuda);
  const auto after_run = engine::memory_stats(cuda);
  engine::release_library_workspaces(cuda);
  const auto after = engine::memory_stats(cuda);
  std::cout << "allocated before " << before.allocated_bytes << " B, after the failed run " << after_run.allocated_bytes
            << " B (peak " << after_run.peak_allocated_bytes << " B), after releasing the cuBLAS workspaces "
            << after.allocated_bytes << " B\n";
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes)
      << "device memory allocated after the failed scenario differs from before";
  EXPECT_GT(after_run.peak_allocated_bytes, before.allocated_bytes)
      << "the scenario should have used the device at all";

  expect_half_gradscaler_fails_at_first_step(cuda);  // again, workspaces re-created by the run itself
  engine::synchronize(cuda);
  const auto after_second = engine::memory_stats(cuda);
  std::cout << "after a second failed run " << after_second.allocated_bytes << " B\n";
  EXPECT_EQ(after_second.allocated_bytes, after_run.allocated_bytes) << "a repeated failing scenario leaks";

  engine::release_library_workspaces(cuda);
  engine::release_cached_memory(cuda);
  const auto emptied = engine::memory_stats(cuda);
  std::cout << "reserved before " << before.reserved_bytes << " B, after empty_cache " << emptied.reserved_bytes
            << " B\n";
  EXPECT_LE(emptied.reserved_bytes, before.reserved_bytes)
      << "the caching allocator still holds memory for the failed scenario after empty_cache";
}

TEST(CudaStrategy, Fp32RunTwiceIsBitIdentical) {
  REQUIRE_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  const auto a = train(micro_run("fp32", 15), cuda);
  const auto b = train(micro_run("fp32", 15), cuda);
  expect_identical_trajectories(a, b);
}

TEST(CudaStrategy, EveryCorrectStrategyLearnsMicro) {
  REQUIRE_CUDA();
  expect_correct_strategies_learn(at::Device(at::kCUDA, 0));
  auto cfg = micro_run("tf32", 120);
  cfg.optimizer.lr = 1e-2;
  expect_loss_falls(train(cfg, at::Device(at::kCUDA, 0)), 1.0, "tf32");
}

TEST(CudaStrategy, PureLowPrecisionParamsRunFinite) {
  REQUIRE_CUDA();
  expect_pure_strategies_run_finite(at::Device(at::kCUDA, 0));
}

TEST(CudaStrategy, OverflowInjectionSkipsTheStepWithFusedAdamW) {
  REQUIRE_CUDA();
  auto cfg = micro_run("fp16-autocast", 12);
  cfg.optimizer.fused = true;
  ampcheck::inject::add_injections(cfg, {grad_injection(5, INFINITY, "h.0.*", 1)});
  const auto t = train(cfg, at::Device(at::kCUDA, 0));
  for (int64_t s = 0; s < t.size(); ++s) EXPECT_EQ(t.rows[s][trajectory::kSkipped], s == 5 ? 1.0 : 0.0) << "step " << s;
  EXPECT_EQ(t.rows[6][trajectory::kLossScale], t.rows[5][trajectory::kLossScale] * 0.5);
  EXPECT_EQ(t.rows[5][trajectory::kUpdateNorm], 0.0);
}
