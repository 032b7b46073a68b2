// engine::FaultHooks — the seam through which planted events reach the trainer (engine/fault_hooks.h). Here: the
// trainer calls a hooks implementation of its own (not harness/inject) at each point, in the step's order, and keeps
// its events; a run without hooks calls nothing; inject's Injector is one such implementation, reached through
// RunConfig::faults, and keeps a `rank:` event to its rank.
#include "engine/fault_hooks.h"
#include "engine/trainer.h"
#include "inject/injection.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

using namespace ampcheck;

namespace {
// Records every call (as "forward@2", "loss@2", ...) and leaves the run unchanged but for one event at step 1.
class RecordingHooks final : public engine::FaultHooks {
 public:
  explicit RecordingHooks(std::shared_ptr<std::vector<std::string>> calls) : calls_(std::move(calls)) {}
  std::shared_ptr<const engine::FaultHooks> for_rank(int64_t) const override {
    return std::make_shared<RecordingHooks>(calls_);
  }
  bool scales_activations() const override { return false; }
  void at_init(std::vector<models::NamedParameter>&, std::vector<std::string>&) const override {
    calls_->push_back("init");
  }
  std::shared_ptr<const engine::FaultHooks> kept_in_reference() const override { return nullptr; }
  std::string reference_key_text() const override { return ""; }
  models::ForwardOptions forward_options(int64_t step, std::vector<std::string>& events) const override {
    calls_->push_back("forward@" + std::to_string(step));
    if (step == 1) events.push_back("step 1: recorded");
    return {};
  }
  double loss_factor(int64_t step) const override { return 1.0; }
  at::Tensor on_loss(const at::Tensor& loss, int64_t step, std::vector<std::string>&) const override {
    calls_->push_back("loss@" + std::to_string(step));
    return loss;
  }
  void after_backward(const std::vector<models::NamedParameter>&, int64_t step) const override {
    calls_->push_back("backward@" + std::to_string(step));
  }
  void on_grads(const std::vector<models::NamedParameter>& params, int64_t step,
                std::vector<std::string>&) const override {
    calls_->push_back("grads@" + std::to_string(step));
    for (const auto& p : params) EXPECT_TRUE(p.tensor.grad().defined()) << p.name << " at step " << step;
  }

 private:
  std::shared_ptr<std::vector<std::string>> calls_;
};
}  // namespace

TEST(EngineFaultHooks, TheTrainerCallsEachHookInTheStepsOrderAndKeepsTheEvents) {
  engine::RunConfig cfg = ampcheck::testing::micro_run("fp32", 2);
  cfg.loop.micro_batches = 2;
  auto calls = std::make_shared<std::vector<std::string>>();
  cfg.faults = std::make_shared<RecordingHooks>(calls);
  engine::Trainer t(cfg, at::kCPU);
  ASSERT_EQ(t.run().status, engine::RunOutcome::Status::Completed);
  // per step: forward and loss per micro-batch, then after_backward once, then the grads once
  const std::vector<std::string> want = {"init",       "forward@0",  "loss@0",    "forward@0", "loss@0",
                                         "backward@0", "grads@0",    "forward@1", "loss@1",    "forward@1",
                                         "loss@1",     "backward@1", "grads@1"};
  EXPECT_EQ(*calls, want);
  // the first micro-batch's events are the trajectory's (the second's would repeat them)
  EXPECT_EQ(t.trajectory().events, std::vector<std::string>{"step 1: recorded"});
}

TEST(EngineFaultHooks, HooksThatChangeNothingLeaveTheRunBitForBit) {
  engine::RunConfig plain = ampcheck::testing::micro_run("fp32", 3);
  engine::RunConfig hooked = plain;
  hooked.faults = std::make_shared<RecordingHooks>(std::make_shared<std::vector<std::string>>());
  // same machine, same process, same ops: the losses are identical, not just close
  EXPECT_EQ(ampcheck::testing::cpu_losses(plain), ampcheck::testing::cpu_losses(hooked));
}

TEST(EngineFaultHooks, InjectorsReachTheEngineThroughRunConfigFaults) {
  engine::RunConfig cfg = ampcheck::testing::micro_run("fp32", 4);
  EXPECT_EQ(cfg.faults, nullptr);
  EXPECT_TRUE(inject::injections(cfg).empty());
  inject::add_injections(cfg, {ampcheck::testing::grad_injection(2, INFINITY, "wte", 1)});
  ASSERT_NE(cfg.faults, nullptr);
  inject::add_injections(cfg, {ampcheck::testing::underflow_injection(3, 1e-3)});
  ASSERT_EQ(inject::injections(cfg).size(), 2u);
  EXPECT_EQ(inject::injections(cfg)[0].kind, inject::InjectionKind::GradValue);
  EXPECT_EQ(inject::injections(cfg)[1].kind, inject::InjectionKind::LossScale);
  engine::Trainer t(cfg, at::kCPU);
  t.run();
  ASSERT_GE(t.trajectory().size(), 3);
  EXPECT_EQ(t.trajectory().rows[2][trajectory::kSkipped], 0.0);  // fp32, no scaler: the inf is applied
  EXPECT_FALSE(std::isfinite(t.trajectory().rows[2][trajectory::kGradNorm]));
  ASSERT_FALSE(t.trajectory().events.empty());
  EXPECT_NE(t.trajectory().events[0].find("step 2: wrote inf into 1 grad(s) matching 'wte'"), std::string::npos)
      << t.trajectory().events[0];
  inject::set_injections(cfg, {});
  EXPECT_EQ(cfg.faults, nullptr);
}

TEST(EngineFaultHooks, AnInjectorKeepsOnlyItsRanksEvents) {
  inject::InjectionConfig everywhere = ampcheck::testing::grad_injection(1, INFINITY, "*", 1);
  inject::InjectionConfig on_one = everywhere;
  on_one.rank = 1;
  inject::InjectionConfig activation;
  activation.kind = inject::InjectionKind::ActivationScale;
  activation.steps = {1};
  activation.rank = 1;
  const inject::Injector all({everywhere, on_one, activation});
  EXPECT_TRUE(all.scales_activations());
  const auto rank0 = std::dynamic_pointer_cast<const inject::Injector>(all.for_rank(0));
  const auto rank1 = std::dynamic_pointer_cast<const inject::Injector>(all.for_rank(1));
  ASSERT_TRUE(rank0 && rank1);
  EXPECT_EQ(rank0->configs().size(), 1u);
  EXPECT_FALSE(rank0->scales_activations());
  EXPECT_EQ(rank1->configs().size(), 3u);
}
