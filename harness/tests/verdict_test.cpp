// Verdicts: every signal's rule on synthetic trajectories (each rule alone, against noise runs whose deviation is
// known), and the reference store's refusals. The planted bugs on real runs are the sensitivity suite
// (scenarios/sensitivity/, CTest label cpu).
#include "run/scenario_run.h"
#include "reference/reference_store.h"
#include "scenario/scenario.h"
#include "trajectory/run_status.h"
#include "verdict/kind.h"
#include "verdict/verdict.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampcheck;

namespace {
std::vector<double> falling(int n, double from, double to) {
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = from + (to - from) * i / (n - 1);
  return x;
}
// A healthy trajectory: loss falling 5 -> 2 over n steps, grad norm 1, update norm 0.01, 0.1% zero grads.
trajectory::Trajectory healthy(int n = 50, double loss_offset = 0.0) {
  trajectory::Trajectory t;
  const auto loss = falling(n, 5, 2);
  for (int i = 0; i < n; ++i) {
    std::array<double, trajectory::kNumColumns> row{};
    row[trajectory::kLoss] = loss[i] + loss_offset;
    row[trajectory::kGradNorm] = 1.0;
    row[trajectory::kParamNorm] = 10;
    row[trajectory::kUpdateNorm] = 0.01;
    row[trajectory::kLossScale] = 1;
    row[trajectory::kFracZero] = 0.001;
    t.rows.push_back(row);
  }
  return t;
}
// Noise runs whose loss lies `loss_noise` nats off the reference and whose norms are 2% off.
std::vector<verdict::NoiseRun> noise(int n = 50, double loss_noise = 0.01) {
  auto a = healthy(n, loss_noise), b = healthy(n, -loss_noise);
  for (auto& r : a.rows) r[trajectory::kGradNorm] *= 1.02, r[trajectory::kUpdateNorm] *= 1.02;
  return {{"ulp+1", a}, {"seed", b}};
}
verdict::Tolerance tol() {
  verdict::Tolerance t;  // the rules' constants pinned here, whatever the defaults (docs/TOLERANCE.md)
  t.k = 3;
  t.ratio_floor = 1.05;
  t.fraction_floor = 0.02;
  t.max_skipped_fraction = 0.2;
  t.window = 5;
  return t;
}
const verdict::SignalResult& signal(const verdict::Verdict& v, const std::string& name) {
  for (const auto& s : v.signals)
    if (s.name == name) return s;
  throw std::runtime_error("no signal " + name);
}
}  // namespace

// The verdicts' words are spelled once (verdict/kind.h): each Kind's word parses back to it, nothing else parses.
TEST(VerdictJudge, KindWordsRoundTrip) {
  const std::vector<std::string> words{"tracks", "diverges", "stalls", "nonfinite", "error"};
  EXPECT_EQ(verdict::kind_words(), words);
  for (auto k : {verdict::Kind::Tracks, verdict::Kind::Diverges, verdict::Kind::Stalls, verdict::Kind::NonFinite,
                 verdict::Kind::Error}) {
    EXPECT_EQ(verdict::parse_kind(verdict::to_string(k)), k);
    EXPECT_TRUE(verdict::is(verdict::to_string(k), k));
  }
  EXPECT_FALSE(verdict::parse_kind(verdict::kNoVerdict).has_value());
  EXPECT_FALSE(verdict::parse_kind("Tracks").has_value());
  EXPECT_FALSE(verdict::is("tracks ", verdict::Kind::Tracks));
}

// A run's status (the trajectory file's `status` attribute, what verdict::judge takes) spelled once.
TEST(VerdictJudge, RunStatusWordsRoundTrip) {
  using trajectory::RunStatus;
  const std::vector<std::string> words{"completed", "nonfinite", "error", "running", "interrupted"};
  EXPECT_EQ(trajectory::run_status_words(), words);
  for (auto s :
       {RunStatus::Completed, RunStatus::NonFinite, RunStatus::Error, RunStatus::Running, RunStatus::Interrupted})
    EXPECT_EQ(trajectory::parse_run_status(trajectory::to_string(s)), s) << trajectory::to_string(s);
  EXPECT_FALSE(trajectory::parse_run_status("Completed").has_value());
  EXPECT_FALSE(trajectory::parse_run_status("").has_value());
}

TEST(VerdictJudge, IdenticalRunTracksWithEverySignalJudgedAtZero) {
  const auto ref = healthy();
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", ref, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "tracks") << v.message;
  EXPECT_EQ(v.max_deviation_bands, 0.0);
  EXPECT_EQ(v.signals.size(), 7u);
  for (const auto& s : v.signals) EXPECT_TRUE(s.judged) << s.name << ": " << s.message;
}

TEST(VerdictJudge, LossAllowanceIsKTimesTheNoiseRunsWhateverTheLossLevel) {
  // noise 0.01 nats -> allowed 0.03. An offset of 0.02 tracks and 0.05 is out, at loss ~3 and at loss ~103 alike:
  // the allowance does not grow with the absolute loss.
  for (double level : {0.0, 100.0}) {
    auto ref = healthy(50, level);
    auto nz = noise();
    for (auto& n : nz)
      for (auto& r : n.trajectory.rows) r[trajectory::kLoss] += level;
    const auto in = verdict::judge(trajectory::RunStatus::Completed, "", healthy(50, level + 0.02), ref, nz, tol());
    EXPECT_EQ(in.verdict, "tracks") << in.message;
    EXPECT_NEAR(signal(in, "loss").allowed, 0.03, 1e-9);
    const auto out = verdict::judge(trajectory::RunStatus::Completed, "", healthy(50, level + 0.05), ref, nz, tol());
    EXPECT_NE(out.verdict, "tracks") << out.message;
    EXPECT_EQ(out.deciding_signal, "loss");
    EXPECT_EQ(out.first_divergence_step, 0);
  }
}

TEST(VerdictJudge, ShedsOnlyPartOfTheLossStalls) {
  const auto ref = healthy();
  auto run = healthy();
  const auto slow = falling(50, 5, 3.8);  // sheds 1.2 of the reference's 3 nats
  for (int i = 0; i < 50; ++i) run.rows[i][trajectory::kLoss] = slow[i];
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_NE(v.message.find("sheds"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("of the loss the reference shed"), std::string::npos) << v.message;
}

TEST(VerdictJudge, CollapsedUpdatesStallWhileTheLossStaysClose) {
  const auto ref = healthy();
  auto run = healthy();
  for (int i = 12; i < 50; ++i) run.rows[i][trajectory::kUpdateNorm] = 0.0003;  // 0.03x
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_EQ(v.deciding_signal, "update_norm");
  EXPECT_GE(v.first_divergence_step, 12);
  EXPECT_FALSE(signal(v, "loss").fired);
  EXPECT_NE(v.message.find("updates 0.03x the reference's"), std::string::npos) << v.message;
}

// Outcomes decide, diagnostics explain: grads flushed to zero while loss, grad norm and updates track are a warning
// (the campaign's correct fp16 runs: docs/TOLERANCE.md), not a stall.
TEST(VerdictJudge, UnderflowedGradsAloneWarnAndTheMessageGivesBothFractions) {
  const auto ref = healthy();
  auto run = healthy();
  for (int i = 10; i < 50; ++i) run.rows[i][trajectory::kFracZero] = 0.62;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "tracks") << v.message;
  EXPECT_EQ(v.deciding_signal, "");
  ASSERT_EQ(v.warnings.size(), 1u) << v.message;
  EXPECT_EQ(v.warnings[0].signal, "zero_grads");
  EXPECT_NE(v.warnings[0].message.find("62% of grad elements zero vs 0.1% in FP32"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("warning: 62% of grad elements zero"), std::string::npos) << v.message;
  // less than the 2-point floor above the reference is never flagged
  auto mild = healthy();
  for (auto& r : mild.rows) r[trajectory::kFracZero] = 0.018;
  const auto m = verdict::judge(trajectory::RunStatus::Completed, "", mild, ref, noise(), tol());
  EXPECT_EQ(m.verdict, "tracks");
  EXPECT_TRUE(m.warnings.empty()) << m.message;
}

TEST(VerdictJudge, ADiagnosticBesideAFailingOutcomeIsNamedAsTheLikelyCause) {
  const auto ref = healthy();
  auto run = healthy();
  for (int i = 10; i < 50; ++i)
    run.rows[i][trajectory::kFracZero] = 0.62, run.rows[i][trajectory::kUpdateNorm] = 0.0003;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_EQ(v.deciding_signal, "update_norm");
  EXPECT_TRUE(v.warnings.empty()) << "a failing verdict explains, it does not warn";
  EXPECT_NE(v.message.find("likely cause (zero_grads): 62% of grad elements zero"), std::string::npos) << v.message;
}

// A step the optimizer skipped is judged by the skipped signal only: its grads (here zeroed, as a clip of inf grads
// leaves them in the HF Trainer) are no sample of the grad norm or the zero fraction.
TEST(VerdictJudge, ASkippedStepsGradsAreNoSample) {
  const auto ref = healthy();
  auto run = healthy();
  for (int i : {20, 35}) {
    run.rows[i][trajectory::kSkipped] = 1;
    run.rows[i][trajectory::kGradNorm] = 0;
    run.rows[i][trajectory::kFracZero] = 0.976;
    run.rows[i][trajectory::kUpdateNorm] = 0;
  }
  auto t = tol();
  t.fraction_floor = 0.02;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), t);
  EXPECT_EQ(v.verdict, "tracks") << v.message;
  EXPECT_TRUE(v.warnings.empty()) << v.message;
  EXPECT_EQ(signal(v, "zero_grads").max_margin, 0.0);
  // the same values on steps the optimizer took are samples: the grad norm and updates collapse there
  for (int i : {20, 35}) run.rows[i][trajectory::kSkipped] = 0;
  const auto w = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), t);
  EXPECT_EQ(w.verdict, "stalls") << w.message;
}

// A loss that ends above the reference while it shed more than the reference did moved elsewhere: diverges, never
// "sheds 402% of the loss the reference shed" under stalls.
TEST(VerdictJudge, ALossThatEndsAboveButShedMoreDivergesAndOneThatShedLessStalls) {
  const auto ref = healthy();
  trajectory::Trajectory high = healthy();
  const auto from = falling(50, 20, 3);  // starts far above, sheds 17 nats vs the reference's 3, ends 1 above
  for (int i = 0; i < 50; ++i) high.rows[i][trajectory::kLoss] = from[i];
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", high, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_EQ(v.message.find("sheds"), std::string::npos) << v.message;
  trajectory::Trajectory slow = healthy();
  const auto less = falling(50, 5, 4);  // sheds 1 of the reference's 3 nats
  for (int i = 0; i < 50; ++i) slow.rows[i][trajectory::kLoss] = less[i];
  const auto s = verdict::judge(trajectory::RunStatus::Completed, "", slow, ref, noise(), tol());
  EXPECT_EQ(s.verdict, "stalls") << s.message;
  EXPECT_NE(s.message.find("sheds 3"), std::string::npos) << s.message;  // ~33%
}

// One first step in the headline and the signal line of a non-finite run.
TEST(VerdictJudge, ANonfiniteHeadlineNamesTheFirstStepTheSignalNames) {
  const auto ref = healthy();
  auto run = healthy(100);
  run.rows[6][trajectory::kFracNonfinite] = 0.01;  // applied (not skipped) at step 6; the run stops at 99
  for (int i = 7; i < 100; ++i) run.rows[i][trajectory::kLoss] = NAN;
  const auto v = verdict::judge(trajectory::RunStatus::NonFinite, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "nonfinite");
  EXPECT_EQ(v.first_divergence_step, 6);
  EXPECT_NE(v.message.find("from step 6"), std::string::npos) << v.message;
  EXPECT_EQ(v.message.find("by step 99"), std::string::npos) << v.message;
  EXPECT_NE(v.signals.front().message.find("first at step 6"), std::string::npos) << v.signals.front().message;
}

// Mixed precision that never took effect: a run that claims it but whose loss is FP32's, bit for bit or within a
// few float32 ulps of the loss (another CPU's FP32 kernels), is a warning; one step beyond that is reduced precision.
TEST(VerdictPrecision, ALossWithinFp32RoundingWhileClaimingReducedPrecisionIsNamed) {
  const auto ref = healthy();
  EXPECT_NE(verdict::precision_not_in_effect(true, ref, ref, noise(), "x").find("bit-identical"), std::string::npos);
  EXPECT_EQ(verdict::precision_not_in_effect(false, ref, ref, noise(), ""), "") << "fp32 claims nothing";
  auto near = ref;
  near.rows[3][trajectory::kLoss] += std::ldexp(near.rows[3][trajectory::kLoss], -23);  // one float32 ulp
  const auto m = verdict::precision_not_in_effect(true, near, ref, {}, "cause");
  EXPECT_NE(m.find("within FP32's own rounding noise"), std::string::npos) << m;
  EXPECT_NE(m.find("(cause)"), std::string::npos) << m;
  auto mixed = ref;
  mixed.rows[1][trajectory::kLoss] += 1e-4;  // fp16 autocast's first steps differ by this much on the micro GPT
  EXPECT_EQ(verdict::precision_not_in_effect(true, mixed, ref, {}, ""), "");
}

TEST(VerdictPrecision, AColumnPresentButNeverMeasuredIsNamed) {
  auto run = healthy();
  for (auto& r : run.rows) r[trajectory::kGradNorm] = NAN;
  const auto w = verdict::unjudged_columns(run, {"loss", "grad_norm", "update_norm"}, true);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].signal, "not_judged");
  EXPECT_NE(w[0].message.find("grad_norm not judged: every value NaN — was step() called after zero_grad()?"),
            std::string::npos)
      << w[0].message;
  EXPECT_TRUE(verdict::unjudged_columns(run, {"loss"}, true).empty()) << "a column the run lacks is reported elsewhere";
  for (auto& r : run.rows) r[trajectory::kSkipped] = 1;  // every step skipped: the skipped signal says it
  EXPECT_TRUE(verdict::unjudged_columns(run, {"loss", "grad_norm"}, true).empty());
}

TEST(VerdictJudge, GrownGradNormDiverges) {
  const auto ref = healthy();
  auto run = healthy();
  for (auto& r : run.rows) r[trajectory::kGradNorm] = 4.0;  // e.g. accumulation over 4 micro-batches, loss not divided
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "diverges") << v.message;
  EXPECT_EQ(v.deciding_signal, "grad_norm");
  EXPECT_NE(v.message.find("true grad norm 4x"), std::string::npos) << v.message;
}

TEST(VerdictJudge, RatioAllowanceFollowsTheNoiseAboveItsFloor) {
  const auto ref = healthy();
  auto run = healthy();
  for (auto& r : run.rows) r[trajectory::kGradNorm] = 1.1;  // 10% off: outside 3 x 2% noise (6%), inside 3 x 4%
  EXPECT_EQ(verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol()).deciding_signal,
            "grad_norm");
  auto nz = noise();
  for (auto& r : nz[0].trajectory.rows) r[trajectory::kGradNorm] = 1.04;
  EXPECT_EQ(verdict::judge(trajectory::RunStatus::Completed, "", run, ref, nz, tol()).verdict, "tracks");
}

TEST(VerdictJudge, SkippedStepsDelayTheComparisonAndTooManyStall) {
  // a run that skipped steps 3 and 4 and is otherwise the reference two steps late: tracks, although its loss is
  // two steps' worth of progress (0.12 nats) above the undelayed reference, 4x the allowed 0.03
  const auto ref = healthy();
  auto late = healthy();
  for (int i = 0; i < 50; ++i) {
    const int j = i <= 3 ? i : std::max(3, i - 2);
    late.rows[i] = ref.rows[j];
    late.rows[i][trajectory::kSkipped] = (i == 3 || i == 4) ? 1.0 : 0.0;
  }
  auto v = verdict::judge(trajectory::RunStatus::Completed, "", late, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "tracks") << v.message;
  EXPECT_EQ(v.skipped_steps, 2);
  // every step skipped: the loss never moves; the skipped-steps signal says so
  auto frozen = healthy();
  for (auto& r : frozen.rows) r = ref.rows[0], r[trajectory::kSkipped] = 1.0;
  v = verdict::judge(trajectory::RunStatus::Completed, "", frozen, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "stalls") << v.message;
  EXPECT_NE(v.message.find("skipped 50 of 50 steps"), std::string::npos) << v.message;
}

TEST(VerdictJudge, NonfiniteGradsAppliedAreNonfiniteButSkippedOnesAreFine) {
  const auto ref = healthy();
  auto run = healthy();
  run.rows[7][trajectory::kFracNonfinite] = 1e-4;
  run.rows[7][trajectory::kSkipped] = 1.0;
  EXPECT_EQ(verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol()).verdict, "tracks");
  run.rows[7][trajectory::kSkipped] = 0.0;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "nonfinite") << v.message;
  EXPECT_EQ(v.first_divergence_step, 7);
}

TEST(VerdictJudge, UnmeasuredColumnsAreNotJudgedAndSaySo) {
  const auto ref = healthy();
  auto run = healthy();
  for (auto& r : run.rows) r[trajectory::kUpdateNorm] = NAN, r[trajectory::kFracZero] = NAN;
  const auto v = verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise(), tol());
  EXPECT_EQ(v.verdict, "tracks");
  EXPECT_FALSE(signal(v, "update_norm").judged);
  EXPECT_NE(signal(v, "update_norm").message.find("not judged"), std::string::npos);
}

TEST(VerdictJudge, ErrorAndNonfiniteStatusWin) {
  const auto ref = healthy(10);
  EXPECT_EQ(verdict::judge(trajectory::RunStatus::Error, "boom", ref, ref, noise(10), tol()).message, "raised: boom");
  EXPECT_EQ(verdict::judge(trajectory::RunStatus::NonFinite, "", ref, ref, noise(10), tol()).verdict, "nonfinite");
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
