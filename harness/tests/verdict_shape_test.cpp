// Verdict words that say what happened (verdict/shapes.h): a loss spike the run recovered from is not a stall, and
// a grad norm a steady factor above the reference's while the loss tracks is named as scaled gradients — each shape
// on synthetic trajectories beside its counter-case (a genuine stall, a spike FP32 did not have, a recovery too short
// to count, a growing grad norm, scaled grads with a loss that moved). Tolerance pinned as in verdict_test.cpp:
// k = 3 over noise runs 0.01 nats off the reference, so the loss allowance is 0.03 nats, the ratio allowance 6%.
#include "verdict/shapes.h"
#include "verdict/verdict.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampcheck;

namespace {

constexpr int kSteps = 60;

// Loss falling 5 -> 2 over n steps, plus `spike` nats on steps [from, from + len); grad norm 1, updates 0.01.
trajectory::Trajectory run_with(double spike = 0, int from = 0, int len = 0, double offset = 0, int n = kSteps) {
  trajectory::Trajectory t;
  for (int i = 0; i < n; ++i) {
    std::array<double, trajectory::kNumColumns> row{};
    row[trajectory::kLoss] = 5.0 - 3.0 * i / (n - 1) + offset + (i >= from && i < from + len ? spike : 0.0);
    row[trajectory::kGradNorm] = 1.0;
    row[trajectory::kParamNorm] = 10;
    row[trajectory::kUpdateNorm] = 0.01;
    row[trajectory::kLossScale] = 1;
    row[trajectory::kFracZero] = 0.001;
    t.rows.push_back(row);
  }
  return t;
}

// Two noise runs 0.01 nats either side of `ref` (so they share its spike, as equally valid FP32 trainings of a
// spiking workload do), norms 2% off.
std::vector<verdict::NoiseRun> noise_around(const trajectory::Trajectory& ref) {
  auto a = ref, b = ref;
  for (auto& r : a.rows) r[trajectory::kLoss] += 0.01, r[trajectory::kGradNorm] *= 1.02;
  for (auto& r : b.rows) r[trajectory::kLoss] -= 0.01, r[trajectory::kUpdateNorm] *= 1.02;
  return {{"ulp+1", a}, {"seed", b}};
}

verdict::Tolerance tol() {
  verdict::Tolerance t;
  t.k = 3;
  t.ratio_floor = 1.05;
  t.fraction_floor = 0.02;
  t.max_skipped_fraction = 0.2;
  t.window = 5;
  return t;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// The Lightning 16-mixed case of issue 41: FP32 spiked at step 30, the fp16 run spiked higher and longer (its
// scaler skipped the overflowing steps) and came back; it ends 0.01 nats above the reference — within the
// allowance — having shed slightly less, which the stall rule alone called "stalls".
TEST(VerdictShape, ALossSpikeBothRunsHadThatRecoveredIsNotAStall) {
  const auto ref = run_with(1.5, 30, 2);
  auto run = run_with(3.0, 30, 5, 0.01);
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_EQ(v.deciding_signal, "loss");
  EXPECT_TRUE(has(v.message, "loss spike at step 30")) << v.message;
  EXPECT_TRUE(has(v.message, "recovered by step")) << v.message;
  EXPECT_TRUE(has(v.message, "FP32 spiked too")) << v.message;
  EXPECT_FALSE(has(v.message, "sheds")) << v.message;
  const auto e = verdict::loss_excursion(v.signals.front(), run, ref, tol());
  EXPECT_TRUE(e.recovered && e.run_spiked && e.reference_spiked);
  EXPECT_GE(e.back_from, 35);  // the smoothed loss is out while the spike is in its 5-step window
  EXPECT_LE(e.back_from, 40);
  EXPECT_LT(e.last_margin, 1.0);
}

// Counter-case: the same spike, after which the loss stays 0.3 nats above — updates stopped, the loss stayed up.
TEST(VerdictShape, ASpikeAfterWhichTheLossStaysAboveStallsAndSaysNotRecovered) {
  const auto ref = run_with(1.5, 30, 2);
  auto run = run_with(3.0, 30, 5);
  for (int i = 35; i < kSteps; ++i) run.rows[i][trajectory::kLoss] = ref.rows[34][trajectory::kLoss] + 0.3;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_TRUE(has(v.message, "not recovered")) << v.message;
  EXPECT_FALSE(has(v.message, "recovered by step")) << v.message;
  EXPECT_FALSE(verdict::loss_excursion(v.signals.front(), run, ref, tol()).recovered);
}

// Counter-case: a spike FP32 did not have, recovered from, is named as such (and still fails: an excursion is an
// outcome beyond the allowance).
TEST(VerdictShape, ASpikeFp32DidNotHaveIsNamedSo) {
  const auto ref = run_with();
  const auto v =
      verdict::judge(trajectory::RunStatus::Completed, "", run_with(2.0, 20, 3), ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_TRUE(has(v.message, "loss spike at step 20")) << v.message;
  EXPECT_TRUE(has(v.message, "FP32 did not spike")) << v.message;
}

// Counter-case: back within the allowance for fewer steps than one smoothing window at the end is no recovery.
TEST(VerdictShape, ARecoveryShorterThanAWindowIsNoRecovery) {
  const auto ref = run_with();
  auto run = run_with();
  // raw loss back on the reference from step 52: the 5-step smoothed loss from step 56, 4 steps before the end
  for (int i = 30; i < kSteps - 8; ++i) run.rows[i][trajectory::kLoss] += 0.5;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_NE(v.verdict, "tracks") << v.message;
  const auto e = verdict::loss_excursion(v.signals.front(), run, ref, tol());
  EXPECT_LE(e.last_margin, 1.0) << "within at the last step, but not for a window";
  EXPECT_FALSE(e.recovered);
  EXPECT_FALSE(has(v.message, "recovered by step")) << v.message;
}

// Counter-case: an excursion from the first steps (the run started elsewhere) has no level before it: recovered,
// but no spike is claimed.
TEST(VerdictShape, AnEarlyExcursionIsRecoveredWithoutASpike) {
  const auto ref = run_with();
  auto run = run_with();
  for (int i = 0; i < 4; ++i) run.rows[i][trajectory::kLoss] += 0.4;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_TRUE(has(v.message, "loss out of its allowance from step 0, recovered by step")) << v.message;
  EXPECT_FALSE(has(v.message, "spike")) << v.message;
}

// Gradients 4x the reference's on every step while the loss tracks (accumulation over 4 micro-batches without
// dividing the loss, under AdamW): still diverges — the grad norm is an outcome — and named as scaled gradients.
TEST(VerdictShape, GradsAFactorAboveThroughoutWithATrackingLossAreScaledGradients) {
  const auto ref = run_with();
  auto run = run_with();
  for (auto& r : run.rows) r[trajectory::kGradNorm] = 4.1;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_EQ(v.deciding_signal, "grad_norm");
  EXPECT_EQ(v.message.rfind("scaled gradients: true grad norm 4.1x the reference's throughout", 0), 0u) << v.message;
  EXPECT_TRUE(has(v.message, "loss tracks")) << v.message;
  EXPECT_TRUE(has(v.message, "not divided by the accumulation steps")) << v.message;
}

// A steady factor from a later step on is named with that step.
TEST(VerdictShape, GradsAFactorAboveFromALaterStepSayFromWhichStep) {
  const auto ref = run_with();
  auto run = run_with();
  for (int i = 6; i < kSteps; ++i) run.rows[i][trajectory::kGradNorm] = 4.0;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_TRUE(has(v.message, "scaled gradients: true grad norm 4x the reference's from step 6")) << v.message;
}

// Counter-case: a grad norm that grows step after step (stale gradients accumulating: zero_grad forgotten) is no
// constant factor.
TEST(VerdictShape, AGrowingGradNormIsNotScaledGradients) {
  const auto ref = run_with();
  auto run = run_with();
  for (int i = 0; i < kSteps; ++i) run.rows[i][trajectory::kGradNorm] = 1.0 + i;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_FALSE(has(v.message, "scaled gradients")) << v.message;
  EXPECT_FALSE(verdict::scaled_grads(v.signals[1], v.signals.front(), run, ref, tol()).scaled);
}

// Counter-case: scaled grads with a loss that moved too are not "loss tracks".
TEST(VerdictShape, ScaledGradsWithALossThatMovedAreNotNamedScaled) {
  const auto ref = run_with();
  auto run = run_with(0, 0, 0, 0.5);
  for (auto& r : run.rows) r[trajectory::kGradNorm] = 4.0;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_NE(v.verdict, "tracks") << v.message;
  EXPECT_FALSE(has(v.message, "scaled gradients")) << v.message;
}

// Counter-case: grads a steady factor *below* the reference's are lost gradient, a stall, not scaled gradients.
TEST(VerdictShape, ShrunkGradsStallAndAreNotScaledGradients) {
  const auto ref = run_with();
  auto run = run_with();
  for (auto& r : run.rows) r[trajectory::kGradNorm] = 0.25;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise_around(ref), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_FALSE(has(v.message, "scaled gradients")) << v.message;
}
