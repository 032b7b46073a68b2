// Verdicts: the judge on synthetic trajectories (each rule alone), and sensitivity on real runs — a correct
// shipped scenario edited into a wrong one must turn from PASS to a FAIL that says what diverged, from which step
// and by how much (the committed cpu references are the yardstick).
#include "engine/scenario_run.h"
#include "reference/reference_store.h"
#include "scenario/scenario.h"
#include "verdict/verdict.h"

#include <gtest/gtest.h>

#include <functional>

using namespace ampcheck;

namespace {
engine::Trajectory make(const std::vector<double>& loss, double update_norm = 1.0) {
  engine::Trajectory t;
  for (double l : loss) {
    std::array<double, engine::kNumColumns> row{};
    row[engine::kLoss] = l;
    row[engine::kParamNorm] = 10;
    row[engine::kUpdateNorm] = update_norm;
    t.rows.push_back(row);
  }
  return t;
}
std::vector<double> falling(int n, double from, double to) {
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = from + (to - from) * i / (n - 1);
  return x;
}
verdict::Tolerance tol() {
  verdict::Tolerance t;
  t.rel_floor = 0.02;
  t.abs_floor = 1e-3;
  t.window = 5;
  return t;
}
}  // namespace

TEST(VerdictJudge, IdenticalRunTracksWithZeroDeviation) {
  auto ref = make(falling(50, 5, 2));
  auto v = verdict::judge("completed", "", ref, ref, std::vector<double>(50, 0.0), tol());
  EXPECT_EQ(v.verdict, "tracks");
  EXPECT_EQ(v.max_deviation_bands, 0.0);
  EXPECT_EQ(v.final_loss_ratio, 1.0);
}

TEST(VerdictJudge, OffsetInsideTheRelativeFloorTracksAndOutsideDiverges) {
  auto ref = make(falling(50, 5, 2));
  auto inside = falling(50, 5, 2), outside = falling(50, 5, 2);
  for (auto& x : inside) x *= 1.015;   // 1.5% < the 2% floor
  for (int i = 30; i < 50; ++i) outside[i] *= 1.05;  // 5% from step 30
  EXPECT_EQ(verdict::judge("completed", "", make(inside), ref, std::vector<double>(50, 0.0), tol()).verdict, "tracks");
  auto v = verdict::judge("completed", "", make(outside), ref, std::vector<double>(50, 0.0), tol());
  EXPECT_EQ(v.verdict, "diverges");
  // The 5-step trailing mean is off by 1%, 2%, 3% ... of the loss at steps 30, 31, 32: it leaves the 2% band at 32.
  EXPECT_EQ(v.first_divergence_step, 32) << v.message;
}

TEST(VerdictJudge, NoiseSpreadWidensTheBand) {
  auto ref = make(falling(50, 5, 2));
  auto run = falling(50, 5, 2);
  for (auto& x : run) x += 0.2;  // ~4-10% off
  std::vector<double> spread(50, 0.1);  // k = 3: band 0.3 > 0.2
  EXPECT_EQ(verdict::judge("completed", "", make(run), ref, spread, tol()).verdict, "tracks");
  EXPECT_EQ(verdict::judge("completed", "", make(run), ref, std::vector<double>(50, 0.0), tol()).verdict, "diverges");
}

TEST(VerdictJudge, FlatLossWithVanishingUpdatesStalls) {
  auto ref = make(falling(50, 5, 2), 1.0);
  auto v = verdict::judge("completed", "", make(std::vector<double>(50, 5.0), 0.01), ref, std::vector<double>(50, 0.0), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_LT(v.update_ratio, 0.25);
}

TEST(VerdictJudge, SlowLearnerWithNormalUpdatesStallsByProgress) {
  auto ref = make(falling(50, 5, 2), 1.0);
  auto v = verdict::judge("completed", "", make(falling(50, 5, 4.5), 1.0), ref, std::vector<double>(50, 0.0), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_NEAR(v.progress_ratio, 0.5 / 3.0, 0.05);
}

TEST(VerdictJudge, LossRisingWithLiveUpdatesDiverges) {
  auto ref = make(falling(50, 5, 2), 1.0);
  auto v = verdict::judge("completed", "", make(falling(50, 5, 7), 1.0), ref, std::vector<double>(50, 0.0), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
}

TEST(VerdictJudge, StatusOverridesTheCurves) {
  auto ref = make(falling(10, 5, 2));
  EXPECT_EQ(verdict::judge("error", "boom", ref, ref, std::vector<double>(10, 0.0), tol()).message, "raised: boom");
  EXPECT_EQ(verdict::judge("nonfinite", "", ref, ref, std::vector<double>(10, 0.0), tol()).verdict, "nonfinite");
}

// ---------------------------------------------------------------------------------------------------------------
// Sensitivity on real runs against the committed cpu references: a correct scenario edited into a wrong one must
// FAIL. The unedited scenarios are the CTest tests cpu.scenario.clip-after-unscale and
// cpu.scenario.fp16-autocast-underflow-scaled (same files, same references, `tracks`); they are not run again here,
// where each 200-step fp16 run costs minutes on a CPU without native fp16.

namespace {
verdict::Verdict check_edited(const std::string& file, const std::function<void(scenario::Scenario&)>& edit) {
  auto sc = scenario::load_scenario(std::string(AMPCHECK_SOURCE_DIR) + "/scenarios/" + file);
  edit(sc);
  const auto ref = reference::load_reference(std::string(AMPCHECK_SOURCE_DIR) + "/references", "cpu", sc.run, "ci");
  const auto r = engine::run_scenario(sc, "cpu");
  return verdict::judge(engine::status_name(r.outcome.status), r.outcome.error, r.trajectory, ref.file.trajectory,
                        ref.loss_spread, sc.tolerance);
}
}  // namespace

TEST(VerdictSensitivity, RemovingUnscaleBeforeClippingIsCaughtWithStepAndSize) {
  const auto bad = check_edited("clip-after-unscale.yaml", [](scenario::Scenario& s) { s.run.loop.clip_unscale_first = false; });
  EXPECT_NE(bad.verdict, "tracks");
  EXPECT_GE(bad.first_divergence_step, 0);
  EXPECT_GT(bad.max_deviation_bands, 10.0);
  EXPECT_NE(bad.message.find("left the band at step " + std::to_string(bad.first_divergence_step)), std::string::npos)
      << bad.message;
}

TEST(VerdictSensitivity, TurningTheScalerOffUnderUnderflowIsCaught) {
  const auto bad = check_edited("fp16-autocast-underflow-scaled.yaml",
                                [](scenario::Scenario& s) { s.run.strategy.scaler.kind = engine::ScalerKind::None; });
  EXPECT_EQ(bad.verdict, "stalls") << bad.message;
  EXPECT_GE(bad.first_divergence_step, 20) << "the underflow starts at step 20; nothing can diverge before it";
}

TEST(VerdictReference, MissingReferenceIsAnErrorWithARecordHint) {
  auto sc = scenario::load_scenario(std::string(AMPCHECK_SOURCE_DIR) + "/scenarios/fp32.yaml");
  sc.run.loop.steps = 7;  // no reference has 7 steps
  try {
    reference::load_reference(std::string(AMPCHECK_SOURCE_DIR) + "/references", "cpu", sc.run, "ci");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT: run `ampcheck record --suite ci`"), std::string::npos) << e.what();
  }
}
