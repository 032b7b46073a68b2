// The bitflip injection: one bit of one element of a parameter or a gradient flipped in place after backward — the
// planted silent data corruption a stack validation must catch. Here: it lands where asked, an fp32 exponent bit
// changes the run beyond recognition, a low mantissa bit changes it only at FP32's rounding level, and the scenario
// parser names what is wrong.
#include "engine/trainer.h"
#include "scenario/scenario.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampcheck;

namespace {
using ampcheck::testing::bitflip_injection;

trajectory::Trajectory train(const engine::RunConfig& cfg) {  // (a flipped exponent may end the run non-finite)
  engine::Trainer t(cfg, at::kCPU);
  EXPECT_NE(t.run().status, engine::RunOutcome::Status::Error);
  return t.trajectory();
}
}  // namespace

TEST(EngineBitFlip, FlipsTheNamedBitOfTheNamedElement) {
  engine::RunConfig cfg = ampcheck::testing::micro_run("fp32", 3);
  engine::Trainer t(cfg, at::kCPU);
  t.run_until(1);
  const at::Tensor w = t.model().parameters()[0].tensor.detach().clone();
  const std::string name = t.model().parameters()[0].name;
  inject::Injector inj({bitflip_injection(0, name, 3, 30, /*param=*/true)});
  std::vector<std::string> events;
  inj.on_grads(t.model().parameters(), 0, events);
  const at::Tensor after = t.model().parameters()[0].tensor.detach();
  const at::Tensor diff = (after.view({-1}).view(at::kInt) ^ w.view({-1}).view(at::kInt));
  EXPECT_EQ(diff.count_nonzero().item<int64_t>(), 1);    // one element changed
  EXPECT_EQ(diff[3].item<int32_t>(), int32_t{1} << 30);  // element 3, bit 30 only
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("flipped bit 30 of element 3 of " + name), std::string::npos) << events[0];
  // out of range: named, not undefined behaviour
  inject::Injector bad({bitflip_injection(0, name, w.numel(), 0, true)});
  EXPECT_THROW(bad.on_grads(t.model().parameters(), 0, events), std::invalid_argument);
  inject::Injector wide({bitflip_injection(0, name, 0, 32, true)});
  EXPECT_THROW(wide.on_grads(t.model().parameters(), 0, events), std::invalid_argument);
}

// An fp32 exponent bit of one parameter element at step 5 moves the run far from the run without it; the lowest
// mantissa bit moves it only at rounding level (relative 1e-4 of the final parameter norm separates the two by orders
// of magnitude either side) — what a detection table states per bit position. (A gradient element's exponent flip is
// another matter under AdamW: the update of that element is bounded by about lr whatever the gradient, and its second
// moment then damps it — on this run the final parameter norm moves by ~1e-6 relative. Not asserted here.)
TEST(EngineBitFlip, ExponentBitChangesTheRunMantissaBitBarely) {
  const engine::RunConfig base = ampcheck::testing::micro_run("fp32", 12);
  const trajectory::Trajectory clean = train(base);
  auto drift = [&](int64_t bit) {
    engine::RunConfig cfg = base;
    ampcheck::inject::set_injections(cfg, {bitflip_injection(5, "h.0.mlp.c_fc.weight", 0, bit, /*param=*/true)});
    const trajectory::Trajectory t = train(cfg);
    EXPECT_EQ(t.events.size(), 1u);
    for (int64_t s = 0; s < 5; ++s) EXPECT_EQ(t.rows[s][trajectory::kLoss], clean.rows[s][trajectory::kLoss]) << s;
    const double a = t.rows.back()[trajectory::kParamNorm], b = clean.rows.back()[trajectory::kParamNorm];
    return std::isfinite(a) ? std::abs(a - b) / b : INFINITY;
  };
  EXPECT_GT(drift(30), 1e-4);
  EXPECT_LT(drift(0), 1e-4);
}

TEST(ScenarioParse, BitflipInjectionParsesAndNamesBadFields) {
  const std::string base = "name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\nstrategy: fp32\ntrain: {steps: 10}\n";
  const auto sc = scenario::parse_scenario(
      base + "inject: [{kind: bitflip, steps: [4], target: param, params: wte, element: 7, bit: 30}]\n", "t.yaml");
  ASSERT_EQ(ampcheck::inject::injections(sc.run).size(), 1u);
  const auto& c = ampcheck::inject::injections(sc.run)[0];
  EXPECT_EQ(c.kind, inject::InjectionKind::BitFlip);
  EXPECT_TRUE(c.flip_param);
  EXPECT_EQ(c.element, 7);
  EXPECT_EQ(c.bit, 30);
  auto error_of = [&](const std::string& inj) {
    try {
      scenario::parse_scenario(base + "inject: [" + inj + "]\n", "t.yaml");
    } catch (const scenario::ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of("{kind: bitflip, steps: [4], bit: 64}").find("inject[0].bit"), std::string::npos);
  EXPECT_NE(error_of("{kind: bitflip, steps: [4], target: moment}").find("inject[0].target"), std::string::npos);
  EXPECT_NE(error_of("{kind: bitflip, steps: [4], params: nothing.*}").find("matches no parameter"), std::string::npos);
}
