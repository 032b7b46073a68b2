// Scenario parsing is strict: each kind of mistake produces a ScenarioError naming file:line:column and the field
// path; every scenario shipped under scenarios/ parses, and every suite names existing files.
#include "scenario/scenario.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace ampcheck::scenario;

namespace {
const char* kBase = R"(name: t
why: "a test"
model: {kind: gpt, preset: micro}
strategy: fp16-autocast
)";

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "scenarios/t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ScenarioParse, MinimalScenarioResolvesDefaults) {
  Scenario s = parse_scenario(kBase, "t.yaml");
  EXPECT_EQ(s.run.name, "t");
  EXPECT_EQ(s.run.strategy.name, "fp16-autocast");
  EXPECT_EQ(s.run.strategy.autocast, at::kHalf);
  EXPECT_EQ(s.expect.verdict, "tracks");
  EXPECT_EQ(s.text, kBase);
}

TEST(ScenarioParse, UnknownKeyNamesFileLineAndField) {
  const std::string e = error_of(std::string(kBase) + "optimizer: {kind: adamw, lrr: 0.1}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.lrr: unknown key"), std::string::npos) << e;
}

TEST(ScenarioParse, WrongTypeNamesTheFieldAndTheValue) {
  const std::string e = error_of(std::string(kBase) + "optimizer:\n  lr: fast\n");
  EXPECT_NE(e.find("scenarios/t.yaml:6:7: optimizer.lr: expected a number, got 'fast'"), std::string::npos) << e;
}

TEST(ScenarioParse, UnknownStrategyListsTheKnownOnes) {
  const std::string e = error_of("name: t\nwhy: w\nstrategy: fp8\n");
  EXPECT_NE(e.find("scenarios/t.yaml:3:11: strategy: unknown strategy 'fp8'"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16-autocast"), std::string::npos) << e;
}

TEST(ScenarioParse, ImpossibleCombinationsAreRefused) {
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: {preset: fp32, master_weights: true}\n").find("master_weights"),
            std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: bf16-autocast\ntrain: {unscale_each_micro_batch: true}\n")
                .find("needs a loss scaler"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "expect: {verdict: error}\n").find("needs expect.error"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {kind: sgd, fused: true}\n").find("fused"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "train: {steps: 0}\n").find("train.steps: must be > 0"), std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: {preset: fp16-autocast, scaler: {growth_factor: 0.5}}\n")
                .find("strategy.scaler.growth_factor: must be > 1.0"),
            std::string::npos);
}

TEST(ScenarioParse, MissingWhyAndNameAreErrors) {
  EXPECT_NE(error_of("name: t\nstrategy: fp32\n").find("why: required"), std::string::npos);
  EXPECT_NE(error_of("why: w\nstrategy: fp32\n").find("name: required"), std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\n").find("strategy: required"), std::string::npos);
}

TEST(ScenarioParse, YamlSyntaxErrorHasALine) {
  const std::string e = error_of("name: t\nwhy: a: b\n");
  EXPECT_NE(e.find("scenarios/t.yaml:2:"), std::string::npos) << e;
}

TEST(ScenarioParse, InjectionsParseWithTheirValues) {
  Scenario s = parse_scenario(std::string(kBase) +
                                  "inject:\n  - {kind: grad, steps: [3, 9], value: -inf, params: 'h.*'}\n"
                                  "  - {kind: underflow, steps: [1], factor: 1.0e-8}\n",
                              "t.yaml");
  ASSERT_EQ(s.run.injections.size(), 2u);
  EXPECT_EQ(s.run.injections[0].steps, (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(s.run.injections[0].value, -INFINITY);
  EXPECT_EQ(s.run.injections[1].factor, 1e-8);
  EXPECT_NE(error_of(std::string(kBase) + "inject:\n  - {kind: underflow, steps: [1]}\n").find("factor: required"),
            std::string::npos);
}

TEST(ScenarioFiles, EveryShippedScenarioAndSuiteParses) {
  const std::string dir = std::string(AMPCHECK_SOURCE_DIR) + "/scenarios";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_scenario(e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GT(n, 5);
  for (const auto& e : std::filesystem::directory_iterator(dir + "/suites")) {
    for (const auto& f : load_suite(dir, e.path().stem().string()))
      EXPECT_TRUE(std::filesystem::exists(f)) << e.path() << " names a missing scenario " << f;
  }
}

TEST(ScenarioParse, LoopPitfallKnobsDefaultToTheCorrectLoopAndParse) {
  const Scenario d = parse_scenario(kBase, "t.yaml");
  EXPECT_TRUE(d.run.loop.divide_loss_by_micro_batches);
  EXPECT_TRUE(d.run.loop.step_through_scaler);
  EXPECT_TRUE(d.run.loop.scale_loss);
  EXPECT_TRUE(d.run.loop.zero_grad);
  const Scenario s = parse_scenario(std::string(kBase) +
                                        "train: {divide_loss_by_micro_batches: false, step_through_scaler: false,"
                                        " scale_loss: false, zero_grad: false}\n",
                                    "t.yaml");
  EXPECT_FALSE(s.run.loop.divide_loss_by_micro_batches);
  EXPECT_FALSE(s.run.loop.step_through_scaler);
  EXPECT_FALSE(s.run.loop.scale_loss);
  EXPECT_FALSE(s.run.loop.zero_grad);
  const std::string e = error_of(std::string(kBase) + "train: {zero_grad: sometimes}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:5:20: train.zero_grad: expected true or false, got 'sometimes'"), std::string::npos)
      << e;
}
