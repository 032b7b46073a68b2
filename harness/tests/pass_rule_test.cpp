// The pass rule (verdict/pass_rule.h) that run, check and judge share: every combination of what was expected and
// what happened, with the exact messages the reports show.
#include "scenario/scenario.h"
#include "verdict/pass_rule.h"

#include <gtest/gtest.h>

namespace {

using ampcheck::verdict::Decision;
using ampcheck::verdict::Expectation;
using ampcheck::verdict::Observation;
using ampcheck::verdict::Verdict;
using ampcheck::verdict::decide;
using ampcheck::verdict::observe;
using ampcheck::verdict::observe_status;

Expectation expect(const std::string& verdict, std::optional<std::string> error = std::nullopt) {
  Expectation e;
  e.verdict = verdict;
  e.error = std::move(error);
  return e;
}

// A judged verdict (check, judge) with its message.
Observation judged(const std::string& verdict, const std::string& message = "msg", int64_t skipped = 0) {
  Verdict v;
  v.verdict = verdict;
  v.message = message;
  v.skipped_steps = skipped;
  return observe(v, "");
}

Observation with_warning(Observation o, const std::string& signal, const std::string& message = "w") {
  o.warnings.push_back({signal, message});
  return o;
}

TEST(PassRule, ObserveCopiesTheVerdict) {
  Verdict v;
  v.verdict = "stalls";
  v.message = "updates collapsed";
  v.skipped_steps = 7;
  v.warnings.push_back({"zero_grads", "z"});
  const Observation o = observe(v, "the error");
  EXPECT_TRUE(o.judged);
  EXPECT_EQ(o.verdict, "stalls");
  EXPECT_EQ(o.message, "updates collapsed");
  EXPECT_EQ(o.error, "the error");
  EXPECT_EQ(o.skipped_steps, 7);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_EQ(o.warnings[0].signal, "zero_grads");
  const Observation s = observe_status("nonfinite", "");
  EXPECT_FALSE(s.judged);
  EXPECT_EQ(s.verdict, "nonfinite");
}

TEST(PassRule, ExpectedVerdictPassesWithTheVerdictsMessage) {
  for (const char* v : {"tracks", "diverges", "stalls", "nonfinite"}) {
    const Decision d = decide(expect(v), judged(v, "what happened"), false);
    EXPECT_TRUE(d.pass) << v;
    EXPECT_EQ(d.message, "what happened");
    EXPECT_EQ(d.verdict_message, "what happened");
  }
}

TEST(PassRule, OtherVerdictFailsNamingBoth) {
  const Decision d = decide(expect("tracks"), judged("diverges", "loss: out at step 12"), false);
  EXPECT_FALSE(d.pass);
  EXPECT_EQ(d.message, "expected tracks, got diverges: loss: out at step 12");
  EXPECT_EQ(d.verdict_message, "loss: out at step 12");
  EXPECT_FALSE(decide(expect("diverges"), judged("stalls"), false).pass);
  EXPECT_FALSE(decide(expect("nonfinite"), judged("tracks"), false).pass);
  EXPECT_FALSE(decide(expect("tracks"), judged("nonfinite"), false).pass);
}

TEST(PassRule, ExpectedErrorNeedsItsMessageWhenOneIsSet) {
  Observation raised = judged("error", "raised: boom");
  raised.error = "boom";
  EXPECT_TRUE(decide(expect("error", "boom"), raised, false).pass);
  const Decision other = decide(expect("error", "bang"), raised, false);
  EXPECT_FALSE(other.pass);
  EXPECT_EQ(other.message, "expected error ('bang'), got error: raised: boom");
  // judge --expect error: any message
  EXPECT_TRUE(decide(expect("error"), raised, false).pass);
  // an error where none was expected, and none where one was
  EXPECT_EQ(decide(expect("tracks"), raised, false).message, "expected tracks, got error: raised: boom");
  EXPECT_EQ(decide(expect("error", "boom"), judged("tracks", "fine"), false).message,
            "expected error ('boom'), got tracks: fine");
}

TEST(PassRule, SkippedStepsOutsideTheBoundsFail) {
  Expectation e = expect("tracks");
  e.skipped_min = 2;
  e.skipped_max = 5;
  EXPECT_TRUE(decide(e, judged("tracks", "m", 2), false).pass);
  EXPECT_TRUE(decide(e, judged("tracks", "m", 5), false).pass);
  const Decision few = decide(e, judged("tracks", "m", 1), false);
  EXPECT_FALSE(few.pass);
  EXPECT_EQ(few.verdict_message, "m; 1 skipped steps, expected 2..5");
  EXPECT_EQ(few.message, "expected tracks, got tracks: m; 1 skipped steps, expected 2..5");
  EXPECT_FALSE(decide(e, judged("tracks", "m", 6), false).pass);
  e.skipped_max = -1;  // a lower bound alone
  EXPECT_TRUE(decide(e, judged("tracks", "m", 60), false).pass);
  e.skipped_min = -1;
  e.skipped_max = 0;  // an upper bound alone
  EXPECT_EQ(decide(e, judged("tracks", "m", 3), false).message,
            "expected tracks, got tracks: m; 3 skipped steps, expected -1..0");
}

TEST(PassRule, ExpectedWarningMissingFails) {
  Expectation e = expect("tracks");
  e.warnings = {"zero_grads"};
  const Decision missing = decide(e, judged("tracks", "m"), false);
  EXPECT_FALSE(missing.pass);
  EXPECT_EQ(missing.message, "expected a zero_grads warning, none was raised (verdict tracks: m)");
  EXPECT_EQ(missing.verdict_message, "m");
  EXPECT_TRUE(decide(e, with_warning(judged("tracks", "m"), "zero_grads"), false).pass);
  // another warning does not stand in for it
  EXPECT_FALSE(decide(e, with_warning(judged("tracks", "m"), "precision"), false).pass);
  // with the verdict unmet too: both reasons
  EXPECT_EQ(decide(e, judged("stalls", "m"), false).message,
            "expected tracks, got stalls: m; expected a zero_grads warning, none was raised");
  e.warnings = {"zero_grads", "fp8_flushed"};
  EXPECT_EQ(decide(e, judged("tracks", "m"), false).message,
            "expected a zero_grads warning, none was raised; expected a fp8_flushed warning, none was raised "
            "(verdict tracks: m)");
}

TEST(PassRule, StrictFailsOnAWarningNotExpected) {
  const Observation warned = with_warning(judged("tracks", "m"), "precision", "mixed precision not in effect");
  EXPECT_TRUE(decide(expect("tracks"), warned, false).pass);  // without --strict a warning decides nothing
  const Decision strict = decide(expect("tracks"), warned, true);
  EXPECT_FALSE(strict.pass);
  EXPECT_EQ(strict.message, "--strict: warning precision: mixed precision not in effect (verdict tracks: m)");
  // an expected warning is allowed under --strict
  Expectation e = expect("tracks");
  e.warnings = {"precision"};
  EXPECT_TRUE(decide(e, warned, true).pass);
  // strict on a verdict that failed anyway: both reasons
  Observation bad = with_warning(judged("diverges", "m"), "zero_grads", "z");
  EXPECT_EQ(decide(expect("tracks"), bad, true).message,
            "expected tracks, got diverges: m; --strict: warning zero_grads: z");
  EXPECT_TRUE(decide(expect("tracks"), judged("tracks", "m"), true).pass);  // strict without warnings
}

TEST(PassRule, AnErrorVerdictsWarningsDecideNothing) {
  Observation raised = with_warning(judged("error", "raised: boom"), "not_judged", "w");
  raised.error = "boom";
  Expectation e = expect("error", "boom");
  e.warnings = {"zero_grads"};
  const Decision d = decide(e, raised, true);
  EXPECT_TRUE(d.pass);
  EXPECT_EQ(d.message, "raised: boom");
  EXPECT_EQ(decide(expect("tracks"), raised, true).message, "expected tracks, got error: raised: boom");
}

TEST(PassRule, NonfiniteVerdict) {
  EXPECT_TRUE(decide(expect("nonfinite"), judged("nonfinite", "nf"), false).pass);
  EXPECT_EQ(decide(expect("tracks"), judged("nonfinite", "nf"), false).message, "expected tracks, got nonfinite: nf");
  // warnings still count for nonfinite
  Expectation e = expect("nonfinite");
  e.warnings = {"fp8_saturated"};
  EXPECT_FALSE(decide(e, judged("nonfinite", "nf"), false).pass);
}

// `run`: no reference, the status alone
TEST(PassRule, WithoutAReferenceACompletedRunMeetsWhatAReferenceDecides) {
  for (const char* v : {"tracks", "diverges", "stalls"}) {
    const Decision d = decide(expect(v), observe_status("completed", ""), false);
    EXPECT_TRUE(d.pass) << v;
    EXPECT_EQ(d.message, std::string("completed; '") + v + "' is judged against the FP32 reference");
    EXPECT_EQ(d.verdict_message, "");
  }
  EXPECT_EQ(decide(expect("tracks"), observe_status("nonfinite", ""), false).message, "run ended nonfinite");
  const Decision err = decide(expect("tracks"), observe_status("error", "boom"), false);
  EXPECT_FALSE(err.pass);
  EXPECT_EQ(err.message, "run ended error: boom");
}

TEST(PassRule, WithoutAReferenceNonfiniteAndErrorAreDecided) {
  const Decision nf = decide(expect("nonfinite"), observe_status("nonfinite", ""), false);
  EXPECT_TRUE(nf.pass);
  EXPECT_EQ(nf.message, "non-finite as expected");
  EXPECT_EQ(decide(expect("nonfinite"), observe_status("completed", ""), false).message, "run completed");
  EXPECT_FALSE(decide(expect("nonfinite"), observe_status("error", "e"), false).pass);
  const Decision raised = decide(expect("error", "boom"), observe_status("error", "boom"), false);
  EXPECT_TRUE(raised.pass);
  EXPECT_EQ(raised.message, "raised: boom");
  const Decision other = decide(expect("error", "bang"), observe_status("error", "boom"), false);
  EXPECT_FALSE(other.pass);
  EXPECT_EQ(other.message, "raised: boom");
  const Decision none = decide(expect("error", "boom"), observe_status("completed", ""), false);
  EXPECT_FALSE(none.pass);
  EXPECT_EQ(none.message, "expected an error, none raised");
  EXPECT_FALSE(decide(expect("error", "boom"), observe_status("nonfinite", ""), false).pass);
}

TEST(PassRule, WithoutAReferenceSkippedStepsWarningsAndStrictAreNotJudged) {
  Expectation e = expect("tracks");
  e.skipped_min = 5;
  e.skipped_max = 9;
  e.warnings = {"zero_grads"};
  Observation o = observe_status("completed", "");
  o.skipped_steps = 0;
  o.warnings.push_back({"precision", "p"});
  EXPECT_TRUE(decide(e, o, true).pass);
}

TEST(PassRule, ScenarioExpectationAlwaysSetsTheErrorMessage) {
  ampcheck::scenario::Expect x;
  x.verdict = "error";
  x.error = "boom";
  x.skipped_min = 1;
  x.skipped_max = 3;
  x.warnings = {"zero_grads"};
  const Expectation e = ampcheck::scenario::expectation(x);
  EXPECT_EQ(e.verdict, "error");
  ASSERT_TRUE(e.error.has_value());
  EXPECT_EQ(*e.error, "boom");
  EXPECT_EQ(e.skipped_min, 1);
  EXPECT_EQ(e.skipped_max, 3);
  EXPECT_EQ(e.warnings, std::vector<std::string>{"zero_grads"});
  // a scenario's error message is compared even when empty (the parser allows none only for other verdicts)
  EXPECT_TRUE(ampcheck::scenario::expectation(ampcheck::scenario::Expect{}).error.has_value());
}

}  // namespace
