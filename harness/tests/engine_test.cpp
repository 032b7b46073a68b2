// Engine invariants: checkpoint/resume is bit-identical (with the scaler state) and differs without it, the
// schedule's shape, clipping as torch.nn.utils.clip_grad_norm_, SGD and AdamW against hand-computed updates,
// the trajectory file round trip and the refusal to overwrite.
#include "test_support.h"

#include "engine/checkpoint.h"
#include "io/files.h"
#include "trajectory/trajectory_file.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstdio>

using namespace ampcheck;
using namespace ampcheck::testing;

TEST(EngineCheckpoint, ResumeIsBitIdenticalToAnUninterruptedRun) {
  auto cfg = micro_run("fp16-autocast", 10);
  cfg.strategy.scaler.growth_interval = 3;  // make the scale change inside the run, so its state matters
  engine::Trainer straight(cfg, at::Device(at::kCPU));
  straight.run_until(10);

  const std::string ck = temp_path("resume.ckpt");
  engine::Trainer first(cfg, at::Device(at::kCPU));
  first.run_until(5);
  first.save_checkpoint(ck);
  engine::Trainer second(cfg, at::Device(at::kCPU));
  second.load_checkpoint(ck);
  ASSERT_EQ(second.next_step(), 5);
  second.run_until(10);

  expect_params_equal(second.model().parameter_tensors(), straight.model().parameter_tensors(), "resumed vs straight");
  for (int64_t s = 0; s < 5; ++s)
    for (int c : {trajectory::kLoss, trajectory::kGradNorm, trajectory::kLossScale, trajectory::kParamNorm})
      ASSERT_EQ(second.trajectory().rows[s][c], straight.trajectory().rows[s + 5][c])
          << "step " << s + 5 << " column " << trajectory::column_name(c);
  std::remove(ck.c_str());
}

TEST(EngineCheckpoint, ResumeWithoutScalerStateRestartsTheScale) {
  auto cfg = micro_run("fp16-autocast", 10);
  cfg.strategy.scaler.growth_interval = 2;
  const std::string ck = temp_path("noscaler.ckpt");
  engine::Trainer first(cfg, at::Device(at::kCPU));
  first.run_until(6);  // three growths: 65536 -> 524288
  first.save_checkpoint(ck);
  engine::Trainer second(cfg, at::Device(at::kCPU));
  second.load_checkpoint(ck, /*restore_scaler=*/false);
  second.run_until(7);
  EXPECT_EQ(first.scaler()->get_scale(), 65536.0 * 8);
  EXPECT_EQ(second.trajectory().rows[0][trajectory::kLossScale], 65536.0)
      << "without the scaler state the resumed run must start again from init_scale";
  std::remove(ck.c_str());
}

TEST(EngineCheckpoint, TensorsRoundTripInEveryDtype) {
  const std::string path = temp_path("tensors.ckpt");
  std::vector<std::pair<std::string, at::Tensor>> ts = {{"f32", at::randn({3, 4})},
                                                        {"f16", at::randn({5}).to(at::kHalf)},
                                                        {"bf16", at::randn({2, 2}).to(at::kBFloat16)},
                                                        {"step", at::full({}, 7.0)}};
  engine::write_checkpoint(path, ts, {{"k", 1}});
  auto ck = engine::read_checkpoint(path);
  EXPECT_EQ(ck.meta["k"], 1);
  for (const auto& [name, t] : ts) EXPECT_TRUE(at::equal(ck.tensors.at(name), t)) << name;
  std::remove(path.c_str());
}

TEST(EngineCheckpoint, CorruptFileIsAnErrorNamingIt) {
  const std::string path = temp_path("bad.ckpt");
  io::write_file_atomically(path, "not a checkpoint");
  try {
    engine::read_checkpoint(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(ScheduleCosine, WarmsUpLinearlyThenDecaysToMinLr) {
  engine::ScheduleConfig s;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(s, 1.0, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(s, 1.0, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(engine::scheduled_lr(s, 1.0, 60, 110), 0.55, 1e-12);  // half-way: (1 + 0.1) / 2
  EXPECT_NEAR(engine::scheduled_lr(s, 1.0, 110, 110), 0.1, 1e-12);
  s.kind = "constant";
  EXPECT_EQ(engine::scheduled_lr(s, 0.3, 5, 110), 0.3);
}

TEST(OptimClip, ScalesGradsToMaxNormLikeClipGradNorm) {
  at::Tensor a = at::full({3}, 3.0), b = at::full({4}, 2.0);  // total norm sqrt(27 + 16) = sqrt(43)
  const double total = std::sqrt(43.0);
  at::Tensor got = engine::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(got.item<double>(), total, 1e-6);
  const double coef = 1.0 / (total + 1e-6);
  EXPECT_NEAR(a[0].item<double>(), 3.0 * coef, 1e-6);
  EXPECT_NEAR(b[0].item<double>(), 2.0 * coef, 1e-6);
  at::Tensor c = at::full({2}, 0.1);
  engine::clip_grad_norm_({c}, 1.0);
  EXPECT_EQ(c[0].item<double>(), static_cast<float>(0.1)) << "a norm under max_norm must leave grads unchanged";
}

TEST(OptimSgd, MomentumUpdateMatchesTorchOptimSgd) {
  at::Tensor p = at::ones({2}).requires_grad_(true);
  engine::OptimizerConfig c;
  c.kind = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.0;
  auto opt = engine::make_optimizer({p}, {false}, c);
  p.mutable_grad() = at::full({2}, 1.0);
  opt->step();  // buf = g = 1; p = 1 - 0.1
  p.mutable_grad() = at::full({2}, 1.0);
  opt->step();  // buf = 0.9 + 1 = 1.9; p = 0.9 - 0.19
  EXPECT_NEAR(p[0].item<double>(), 0.71, 1e-6);
}

TEST(OptimAdamW, FirstStepMovesEachWeightByLrTimesSignOfGrad) {
  // After one step, m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps) ~ lr * sign(g); decay
  // multiplies p by (1 - lr * wd) first.
  at::Tensor p = at::full({3}, 2.0).requires_grad_(true);
  engine::OptimizerConfig c;
  c.lr = 0.01;
  c.weight_decay = 0.5;
  auto opt = engine::make_optimizer({p}, {true}, c);
  p.mutable_grad() = at::tensor({1.0f, -2.0f, 0.5f});
  opt->step();
  const double decayed = 2.0 * (1 - 0.01 * 0.5);
  EXPECT_NEAR(p[0].item<double>(), decayed - 0.01, 1e-6);
  EXPECT_NEAR(p[1].item<double>(), decayed + 0.01, 1e-6);
  EXPECT_NEAR(p[2].item<double>(), decayed - 0.01, 1e-6);
  const auto st = opt->state();
  EXPECT_EQ(st[2].first, "step.0");
  EXPECT_EQ(st[2].second.item<double>(), 1.0);
}

TEST(EngineTrajectoryFile, RoundTripsAndRefusesToOverwrite) {
  engine::Trainer t(micro_run("fp32", 3), at::Device(at::kCPU));
  t.run_until(3);
  trajectory::TrajectoryFile f;
  f.attributes.scenario_name = "x";
  f.trajectory = t.trajectory();
  f.trajectory.events.push_back("step 1: something");
  const std::string path = temp_path("traj.h5");
  std::remove(path.c_str());
  trajectory::write_trajectory(path, f, false);
  auto back = trajectory::read_trajectory(path);
  EXPECT_EQ(back.attributes.scenario_name.value_or(""), "x");
  EXPECT_EQ(back.trajectory.events, f.trajectory.events);
  expect_identical_trajectories(back.trajectory, f.trajectory);
  try {
    trajectory::write_trajectory(path, f, false);
    FAIL() << "an existing file was overwritten without force";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(EngineProbes, TrueGradNormIsIndependentOfTheLossScale) {
  // fp32 params + scaler with two different init scales: the recorded (unscaled) grad norm must agree to fp32
  // rounding, since scaling by a power of two and dividing it out again is exact barring under/overflow.
  auto a = micro_run("fp16-autocast", 1), b = micro_run("fp16-autocast", 1);
  a.strategy.autocast.reset();
  b.strategy.autocast.reset();
  b.strategy.scaler.init_scale = 1024;
  engine::Trainer ta(a, at::Device(at::kCPU)), tb(b, at::Device(at::kCPU));
  ta.run_until(1);
  tb.run_until(1);
  EXPECT_EQ(ta.trajectory().rows[0][trajectory::kGradNorm], tb.trajectory().rows[0][trajectory::kGradNorm]);
  EXPECT_EQ(ta.trajectory().rows[0][trajectory::kLossScale], 65536.0);
  EXPECT_EQ(tb.trajectory().rows[0][trajectory::kLossScale], 1024.0);
}

// The accumulation invariance: in FP32 an optimizer step over one batch of 8 and over 2 micro-batches of 4 (the loss
// divided by the micro-batches) is the same update — the same samples (data::BatchSampler keys a sample by its index
// in the step's global batch), the same mean gradient, summed in another order (tolerance 1e-5 relative: float32
// rounding of two partial means, ~1e-7, with margin; a wrong division is off by 100%). Without the division (the
// pitfall) the grads are the sum: the true grad norm doubles.
TEST(EngineAccumulation, OneBatchAndTwoMicroBatchesGiveTheSameUpdateInFp32) {
  auto whole = micro_run("fp32", 3), split = micro_run("fp32", 3), undivided = micro_run("fp32", 3);
  whole.data.batch_size = 8;
  split.data.batch_size = 4;
  split.loop.micro_batches = 2;
  undivided.data.batch_size = 4;
  undivided.loop.micro_batches = 2;
  undivided.loop.divide_loss_by_micro_batches = false;
  for (auto* c : {&whole, &split, &undivided})
    c->optimizer.kind = "sgd", c->optimizer.lr = 0.05, c->optimizer.momentum = 0;
  engine::Trainer a(whole, at::kCPU), b(split, at::kCPU), u(undivided, at::kCPU);
  a.run();
  b.run();
  u.run();
  for (int s = 0; s < 3; ++s) {
    const auto& ra = a.trajectory().rows[s];
    const auto& rb = b.trajectory().rows[s];
    for (int c : {trajectory::kLoss, trajectory::kGradNorm, trajectory::kUpdateNorm, trajectory::kParamNorm})
      EXPECT_NEAR(rb[c], ra[c], 1e-5 * std::abs(ra[c])) << "step " << s << ", " << trajectory::column_name(c);
  }
  auto pa = a.model().parameter_tensors(), pb = b.model().parameter_tensors();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const double diff = (pa[i] - pb[i]).abs().max().item<double>(), scale = pa[i].abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale + 1e-7) << "parameter " << a.model().parameters()[i].name;
  }
  EXPECT_NEAR(u.trajectory().rows[0][trajectory::kGradNorm], 2 * a.trajectory().rows[0][trajectory::kGradNorm],
              1e-5 * a.trajectory().rows[0][trajectory::kGradNorm])
      << "without dividing the loss the accumulated grads are the sum of the micro-batches'";
}

// Dropout draws from ATen's default generator; the run seeds it per step (engine/run_randomness.h). A draw from that
// generator between two runs (as anything else in the process may make) must not change the second run, a resumed
// run must draw the masks of an uninterrupted one, and the process's generator is as the run found it.
TEST(EngineDropout, RunIsBitReproducibleWhateverTheGlobalGeneratorDid) {
  auto cfg = micro_run("bf16-autocast", 6);
  cfg.model.dropout = 0.1;
  cfg.loop.digests = true;
  engine::Trainer first(cfg, at::Device(at::kCPU));
  first.run_until(6);
  (void)at::rand({1000});  // the global generator moves on
  const at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  auto second_ptr = std::make_unique<engine::Trainer>(cfg, at::Device(at::kCPU));
  engine::Trainer& second = *second_ptr;
  second.run_until(6);
  expect_params_equal(second.model().parameter_tensors(), first.model().parameter_tensors(), "dropout run twice");
  ASSERT_EQ(first.trajectory().digests.grads.size(), 6u);
  const trajectory::Trajectory second_trajectory = second.trajectory();
  second_ptr.reset();  // the run ends
  EXPECT_TRUE(at::equal(before, at::detail::getDefaultCPUGenerator().get_state()))
      << "a run that has ended leaves the process's default generator as it found it";
  EXPECT_EQ(first.trajectory().digests.grads, second_trajectory.digests.grads) << "every gradient's digest, every step";
  EXPECT_EQ(first.trajectory().digests.params, second_trajectory.digests.params);
  for (int64_t s = 0; s < 6; ++s)
    ASSERT_EQ(first.trajectory().rows[s][trajectory::kLoss], second_trajectory.rows[s][trajectory::kLoss])
        << "step " << s;
  // the masks do act: without dropout the loss differs
  auto off = cfg;
  off.model.dropout = 0.0;
  engine::Trainer plain(off, at::Device(at::kCPU));
  plain.run_until(1);
  EXPECT_NE(plain.trajectory().rows[0][trajectory::kLoss], first.trajectory().rows[0][trajectory::kLoss]);
}

TEST(EngineDropout, ResumedRunDrawsTheMasksOfAnUninterruptedOne) {
  auto cfg = micro_run("fp32", 8);
  cfg.model.dropout = 0.2;
  engine::Trainer straight(cfg, at::Device(at::kCPU));
  straight.run_until(8);
  const std::string ck = temp_path("dropout-resume.ckpt");
  engine::Trainer first(cfg, at::Device(at::kCPU));
  first.run_until(4);
  first.save_checkpoint(ck);
  (void)at::rand({77});
  engine::Trainer second(cfg, at::Device(at::kCPU));
  second.load_checkpoint(ck);
  second.run_until(8);
  expect_params_equal(second.model().parameter_tensors(), straight.model().parameter_tensors(), "resumed vs straight");
  std::remove(ck.c_str());
}

TEST(EngineDropout, StepSeedsDifferPerStepAndRank) {
  EXPECT_NE(engine::step_seed(1337, 0, 0), engine::step_seed(1337, 1, 0));
  EXPECT_NE(engine::step_seed(1337, 0, 0), engine::step_seed(1337, 0, 1));
  EXPECT_NE(engine::step_seed(1337, 0, 0), engine::step_seed(1338, 0, 0));
  EXPECT_EQ(engine::step_seed(1337, 5, 2), engine::step_seed(1337, 5, 2));
}

// The same on a GPU: dropout (SDPA's dropout_p and at::dropout) draws from the CUDA default generator (Philox), which
// the run seeds per step; two runs of one process, the generator moved on between them, give identical digests.
TEST(CudaDropout, RunIsBitReproducibleOnTheGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this machine";
  auto cfg = micro_run("bf16-autocast", 6);
  cfg.model.dropout = 0.1;
  cfg.loop.digests = true;
  const at::Device cuda(at::kCUDA, 0);
  trajectory::Trajectory first;
  {
    engine::Trainer t(cfg, cuda);
    t.run_until(6);
    first = t.trajectory();
  }
  (void)at::rand({1000}, at::TensorOptions().device(cuda));
  engine::Trainer second(cfg, cuda);
  second.run_until(6);
  EXPECT_EQ(first.digests.grads, second.trajectory().digests.grads) << "every gradient's digest, every step";
  EXPECT_EQ(first.digests.params, second.trajectory().digests.params);
}
