// Shared helpers for the engine tests: small run configs and exact / banded comparisons in float64.
#pragma once

#include "engine/run_config.h"
#include "engine/trainer.h"
#include "inject/injection.h"
#include "scenario/scenario.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace ampcheck::testing {

// A GPT `micro` (~30k params) on the synthetic stream: a step takes about a millisecond on one CPU core.
inline engine::RunConfig micro_run(const std::string& strategy, int64_t steps = 20) {
  engine::RunConfig cfg;
  cfg.name = "test-" + strategy;
  cfg.model.kind = "gpt";
  cfg.model.preset = "micro";
  cfg.data.batch_size = 4;
  cfg.data.seq_len = 32;
  cfg.data.corpus_tokens = 1 << 15;
  cfg.optimizer.lr = 3e-3;
  cfg.schedule.warmup_steps = 5;
  cfg.loop.steps = steps;
  cfg.strategy = engine::strategy_preset(strategy);
  return cfg;
}

// The per-step losses of a run of `cfg` on the CPU.
inline std::vector<double> cpu_losses(const engine::RunConfig& cfg) {
  engine::Trainer t(cfg, at::kCPU);
  t.run();
  std::vector<double> out;
  for (const auto& row : t.trajectory().rows) out.push_back(row[trajectory::kLoss]);
  return out;
}

inline inject::InjectionConfig grad_injection(int64_t step, double value, const std::string& params, int64_t count) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::GradValue;
  c.steps = {step};
  c.value = value;
  c.params = params;
  c.count = count;
  return c;
}

// one bit of one element of the first parameter matching `params` (its value where param, else its gradient)
inline inject::InjectionConfig bitflip_injection(int64_t step, const std::string& params, int64_t element, int64_t bit,
                                                 bool param) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::BitFlip;
  c.steps = {step};
  c.params = params;
  c.element = element;
  c.bit = bit;
  c.flip_param = param;
  return c;
}

inline inject::InjectionConfig underflow_injection(int64_t step, double factor, bool compensate = true) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::LossScale;
  c.steps = {step};
  c.factor = factor;
  c.compensate = compensate;
  return c;
}

// Every column of every row equal bit for bit (NaN == NaN), step time excluded.
inline void expect_identical_trajectories(const trajectory::Trajectory& a, const trajectory::Trajectory& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int64_t s = 0; s < a.size(); ++s)
    for (int c = 0; c < trajectory::kNumColumns; ++c) {
      if (c == trajectory::kStepTimeMs) continue;
      const double x = a.rows[s][c], y = b.rows[s][c];
      if (std::isnan(x) && std::isnan(y)) continue;
      ASSERT_EQ(x, y) << "step " << s << ", column " << trajectory::column_name(c) << ": got " << x << ", want " << y;
    }
}

// Two runs that differ only in how their norms are summed (an engine option that moves a norm into another pass):
// losses, skipped steps and loss scales bit for bit, parameter and gradient norms within `rel` relative (a
// non-finite gradient norm in both). `what` names the case in failures.
inline void expect_same_run_but_norms(const trajectory::Trajectory& want, const trajectory::Trajectory& got,
                                      size_t steps, double rel, const std::string& what) {
  const auto &ra = want.rows, &rb = got.rows;
  ASSERT_EQ(ra.size(), steps) << what;
  ASSERT_EQ(rb.size(), steps) << what;
  for (size_t s = 0; s < steps; ++s) {
    const std::string at_step = what + ", step " + std::to_string(s);
    EXPECT_EQ(rb[s][trajectory::kLoss], ra[s][trajectory::kLoss]) << at_step;
    EXPECT_EQ(rb[s][trajectory::kSkipped], ra[s][trajectory::kSkipped]) << at_step;
    EXPECT_EQ(rb[s][trajectory::kLossScale], ra[s][trajectory::kLossScale]) << at_step;
    EXPECT_NEAR(rb[s][trajectory::kParamNorm], ra[s][trajectory::kParamNorm], rel * ra[s][trajectory::kParamNorm])
        << at_step;
    if (std::isfinite(ra[s][trajectory::kGradNorm]))
      EXPECT_NEAR(rb[s][trajectory::kGradNorm], ra[s][trajectory::kGradNorm], rel * ra[s][trajectory::kGradNorm])
          << at_step;
    else
      EXPECT_FALSE(std::isfinite(rb[s][trajectory::kGradNorm])) << at_step;
  }
}

inline void expect_params_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(at::equal(got[i].cpu(), want[i].cpu())) << what << ": parameter " << i << " differs";
}

inline std::vector<at::Tensor> snapshot(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

inline std::string temp_path(const std::string& stem) {
  return ::testing::TempDir() + "/ampcheck_" + stem + "_" + std::to_string(::getpid());
}

// How many nodes of the autograd graph behind `root` have a name containing each of `names` (an engine option's
// custom functions, say).
inline std::vector<int> count_graph_nodes(const at::Tensor& root, const std::vector<std::string>& names) {
  std::vector<int> counts(names.size(), 0);
  std::vector<torch::autograd::Node*> todo{root.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (size_t i = 0; i < names.size(); ++i)
      if (n->name().find(names[i]) != std::string::npos) ++counts[i];
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return counts;
}

// A boolean model field (an engine option for GPTs): `field: true` parses for kind gpt; for an MLP the scenario is
// refused with an error that names the field.
inline void expect_gpt_only_model_flag(const std::string& field, bool (*read)(const scenario::Scenario&)) {
  const std::string base = "name: t\nwhy: w\ndata: {batch_size: 8, seq_len: 32}\nstrategy: fp32\n";
  const auto sc =
      scenario::parse_scenario(base + "model: {kind: gpt, preset: micro, " + field + ": true}\n", "scenarios/t.yaml");
  EXPECT_TRUE(read(sc)) << field;
  try {
    scenario::parse_scenario(base + "model: {kind: mlp, " + field + ": true}\n", "scenarios/t.yaml");
    ADD_FAILURE() << field << " accepted for an MLP";
  } catch (const scenario::ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

}  // namespace ampcheck::testing
