// The module tree, the per-module precision policy (model.keep_fp32), the planted module fault (inject
// scale_weights) and the first non-finite module (engine::RunOutcome::first_nonfinite_*), on the CPU in seconds.
#include "engine/engine_plan.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "test_support.h"

#include <ampcheck/amp/autocast.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace ampcheck {
namespace {

using testing::micro_run;

std::vector<std::string> names_of(const std::vector<models::ModuleInfo>& tree) {
  std::vector<std::string> out;
  for (const auto& m : tree) out.push_back(m.name);
  return out;
}

models::ModelConfig resolved(const std::string& kind, const std::string& preset) {
  models::ModelConfig c;
  c.kind = kind;
  c.preset = preset;
  return models::resolve_preset(c);
}

// Top-level modules (no '.' in the name but h.<l> / fc.<l>) hold every parameter once: their counts sum to the
// model's, and every parameter lies in exactly one leaf module.
void expect_tree_covers_parameters(const models::Model& model) {
  const auto& tree = model.module_tree();
  int64_t top = 0;
  for (const auto& m : tree)
    if (std::count(m.name.begin(), m.name.end(), '.') <= (m.name.rfind("h.", 0) == 0 || m.name.rfind("fc.", 0) == 0))
      top += m.parameters;
  EXPECT_EQ(top, model.parameter_count()) << model.describe();
  for (const auto& p : model.parameters()) {
    int owners = 0;
    for (const auto& m : tree) owners += models::parameter_in_module(p.name, m.name) ? 1 : 0;
    EXPECT_GE(owners, 1) << p.name << " lies in no module";
  }
}

TEST(ModulePrecision, ModuleTreeNamesTheGptModulesAsNamedModules) {
  const models::ModelConfig nano = resolved("gpt", "nano");
  const std::vector<std::string> names = names_of(models::module_tree(nano));
  ASSERT_EQ(names.size(), 2u + 9u * 4u + 2u) << "wte, wpe, 9 per block x 4 blocks, ln_f, lm_head";
  const std::vector<std::string> block3 = {"h.3",      "h.3.ln_1", "h.3.attn",     "h.3.attn.c_attn", "h.3.attn.c_proj",
                                           "h.3.ln_2", "h.3.mlp",  "h.3.mlp.c_fc", "h.3.mlp.c_proj"};
  EXPECT_EQ(names.front(), "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 2 + 27, names.begin() + 2 + 36), block3);
  EXPECT_EQ(names[names.size() - 2], "ln_f");
  EXPECT_EQ(names.back(), "lm_head");
  auto micro = models::make_model(resolved("gpt", "micro"));
  EXPECT_EQ(names_of(micro->module_tree()), names_of(models::module_tree(resolved("gpt", "micro"))));
  expect_tree_covers_parameters(*micro);
  EXPECT_EQ(micro->module_tree().back().parameters, 0) << "lm_head is tied: wte owns its weight";
}

TEST(ModulePrecision, ModuleTreeNamesTheMlpModules) {
  auto small = models::make_model(resolved("mlp", "small"));
  EXPECT_EQ(names_of(small->module_tree()), (std::vector<std::string>{"embed", "fc.0", "fc.1", "head"}));
  expect_tree_covers_parameters(*small);
}

// Records the dtype each matmul site's input arrives in and leaves the site to the model (undefined result).
struct SiteDtypes : models::MatmulOverride {
  std::map<std::string, at::ScalarType> seen;
  std::vector<std::string> sites;
  at::Tensor linear(int site, const at::Tensor& x, const at::Tensor&, const at::Tensor&) override {
    seen[sites[static_cast<size_t>(site)]] = x.scalar_type();
    return {};
  }
  at::Tensor embedding(int, const at::Tensor&, const at::Tensor&) override { return {}; }
};

// keep_fp32 [h.1.mlp.c_fc] under bf16 autocast: c_fc leaves the override (the ATen path runs it, in fp32), and its
// output — GELU'd, the next Linear's input — is fp32, where without the policy it is bf16.
TEST(ModulePrecision, KeptModuleComputesInFp32UnderBf16Autocast) {
  for (const bool keep : {false, true}) {
    models::ModelConfig cfg = resolved("gpt", "micro");
    if (keep) cfg.keep_fp32 = {"h.1.mlp.c_fc"};
    auto model = models::make_model(cfg);
    SiteDtypes probe;
    probe.sites = model->matmul_sites();
    model->set_matmul_override(&probe);
    const at::Tensor tokens = at::randint(cfg.vocab_size, {2, 16}, at::kLong);
    amp::AutocastGuard autocast(at::kCPU, at::kBFloat16);
    const at::Tensor loss = model->loss(tokens, tokens);
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_EQ(probe.seen.count("h.1.mlp.c_fc"), keep ? 0u : 1u) << "a kept module takes the ATen path";
    ASSERT_EQ(probe.seen.count("h.1.mlp.c_proj"), 1u);
    EXPECT_EQ(probe.seen["h.1.mlp.c_proj"], keep ? at::kFloat : at::kBFloat16) << "keep " << keep;
    EXPECT_EQ(probe.seen["h.0.mlp.c_proj"], at::kBFloat16) << "block 0 is not kept";
  }
}

// Under a model cast whole to bf16, the kept module's parameters stay fp32 and its output is cast back to bf16.
TEST(ModulePrecision, KeptModuleKeepsFp32ParametersUnderPureBf16) {
  models::ModelConfig cfg = resolved("gpt", "micro");
  cfg.keep_fp32 = {"h.1.mlp.c_fc"};
  auto model = models::make_model(cfg);
  model->to(at::kCPU, at::kBFloat16);
  for (const auto& p : model->parameters())
    EXPECT_EQ(p.tensor.scalar_type(), p.name.rfind("h.1.mlp.c_fc.", 0) == 0 ? at::kFloat : at::kBFloat16) << p.name;
  EXPECT_EQ(model->dtype(), at::kBFloat16);
  SiteDtypes probe;
  probe.sites = model->matmul_sites();
  model->set_matmul_override(&probe);
  const at::Tensor tokens = at::randint(cfg.vocab_size, {2, 16}, at::kLong);
  model->loss(tokens, tokens).backward();
  EXPECT_EQ(probe.seen["h.1.mlp.c_proj"], at::kBFloat16) << "the kept region's output is cast back";
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
}

std::vector<std::string> every_top_module(const engine::RunConfig& cfg) {
  std::vector<std::string> out;
  for (const auto& m : models::module_tree(models::resolve_preset(cfg.model)))
    if (m.name.find('.') == std::string::npos ||
        std::count(m.name.begin(), m.name.end(), '.') == 1 && m.name.rfind("h.", 0) == 0)
      out.push_back(m.name);
  return out;
}

// Keep-everything under bf16 autocast is the FP32 computation: every matmul, norm and attention runs with autocast
// off on fp32 inputs, and the loss is autocast's fp32 op anyway. Tolerance 1e-6 relative per step: the same ops in
// the same order (bit-identical here, but a test does not promise it); 20 steps of training compound any slip.
// Under pure bf16 the kept modules' outputs are rounded to bf16 at each top-level boundary (the model's dtype):
// 2^-8 relative per rounding; the loss stays within 2% of FP32's over 20 steps.
TEST(ModulePrecision, KeepEverythingReproducesFp32) {
  const std::vector<double> fp32 = testing::cpu_losses(micro_run("fp32"));
  engine::RunConfig autocast = micro_run("bf16-autocast");
  autocast.model.keep_fp32 = every_top_module(autocast);
  ASSERT_EQ(autocast.model.keep_fp32.size(), 6u);  // wte, wpe, h.0, h.1, ln_f, lm_head
  const std::vector<double> kept = testing::cpu_losses(autocast);
  const std::vector<double> plain = testing::cpu_losses(micro_run("bf16-autocast"));
  ASSERT_EQ(kept.size(), fp32.size());
  double plain_gap = 0;
  for (size_t s = 0; s < fp32.size(); ++s) {
    EXPECT_NEAR(kept[s], fp32[s], 1e-6 * std::abs(fp32[s])) << "step " << s;
    plain_gap = std::max(plain_gap, std::abs(plain[s] - fp32[s]));
  }
  EXPECT_GT(plain_gap, 1e-4) << "bf16 autocast without the policy differs from FP32 (the test can fail)";
  engine::RunConfig pure = micro_run("bf16-pure");
  pure.model.keep_fp32 = every_top_module(pure);
  const std::vector<double> pure_kept = testing::cpu_losses(pure);
  for (size_t s = 0; s < fp32.size(); ++s) EXPECT_NEAR(pure_kept[s], fp32[s], 0.02 * fp32[s]) << "step " << s;
}

// The planted module fault: h.1.attn.c_proj's weights x kFactor make its fp16 output overflow: under fp16 autocast
// with a GradScaler every step is skipped and the first non-finite module is that one, in the forward pass; FP32
// with the same fault trains with finite losses and nothing to name.
constexpr double kMicroFactor = 3e7;
inject::InjectionConfig scale_weights(const std::string& module, double factor) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::ScaleWeights;
  c.module = module;
  c.factor = factor;
  return c;
}

TEST(ModulePrecision, PlantedFaultOverflowsFp16AndIsNamedFirst) {
  engine::RunConfig fp16 = micro_run("fp16-autocast", 6);
  inject::set_injections(fp16, {scale_weights("h.1.attn.c_proj", kMicroFactor)});
  engine::Trainer t(fp16, at::kCPU);
  const engine::RunOutcome out = t.run();
  int64_t skipped = 0;
  for (const auto& row : t.trajectory().rows) skipped += row[trajectory::kSkipped] > 0 ? 1 : 0;
  EXPECT_EQ(skipped, 6) << "every step skipped for the overflow";
  EXPECT_EQ(out.first_nonfinite_step, 0);
  EXPECT_EQ(out.first_nonfinite_module, "h.1.attn.c_proj");
  EXPECT_EQ(out.first_nonfinite_pass, "forward");

  engine::RunConfig fp32 = micro_run("fp32", 6);
  inject::set_injections(fp32, inject::injections(fp16));
  engine::Trainer f(fp32, at::kCPU);
  const engine::RunOutcome fine = f.run();
  EXPECT_EQ(fine.status, engine::RunOutcome::Status::Completed);
  EXPECT_EQ(fine.first_nonfinite_step, -1);
  for (const auto& row : f.trajectory().rows) EXPECT_TRUE(std::isfinite(row[trajectory::kLoss]));
}

// A NaN planted into the grads after backward: the step is non-finite, but no module's output or input gradient held
// it, so the step is named and the module is not.
TEST(ModulePrecision, ValueNotFromAModuleNamesTheStepOnly) {
  engine::RunConfig cfg = micro_run("fp16-autocast", 4);
  cfg.strategy.scaler.init_scale = 1.0;  // no overflow of its own
  inject::set_injections(cfg, {testing::grad_injection(2, NAN, "wte", 1)});
  engine::Trainer t(cfg, at::kCPU);
  const engine::RunOutcome out = t.run();
  EXPECT_EQ(out.first_nonfinite_step, 2);
  EXPECT_EQ(out.first_nonfinite_module, "");
}

// A fast path that covers a kept module is refused for it in the engine plan, with the reason.
TEST(ModulePrecision, EnginePlanRefusesFastPathsForKeptModules) {
  engine::RunConfig cfg = micro_run("bf16-autocast");
  cfg.model.head_loss = models::HeadLoss::Fused;
  cfg.model.fused_bias_gelu = true;
  cfg.model.fused_layernorm = true;
  cfg.model.keep_fp32 = {"lm_head", "h.0.attn.c_proj"};
  const engine::EnginePlan plan = engine::resolve_engine_plan(cfg, at::kCPU, false);
  const engine::OptionDecision* head = plan.find("model.head_loss");
  ASSERT_NE(head, nullptr);
  EXPECT_FALSE(head->applied);
  EXPECT_NE(head->note.find("keep_fp32 keeps lm_head"), std::string::npos) << head->note;
  const engine::OptionDecision* ln = plan.find("model.fused_layernorm");
  ASSERT_NE(ln, nullptr);
  EXPECT_FALSE(ln->applied) << ln->note;
  bool bias_refused_for_kept = false;
  for (const auto& d : plan.decisions)
    if (d.option == "model.fused_bias_gelu" && !d.applied && d.label.find("h.0.attn.c_proj") != std::string::npos)
      bias_refused_for_kept = true;
  EXPECT_TRUE(bias_refused_for_kept) << plan.describe();
  EXPECT_TRUE(plan.find("model.fused_bias_gelu")->applied) << "the other Linears keep the option";
  // and the run trains, the kept Linear on the ATen path
  cfg.loop.steps = 3;
  for (double l : testing::cpu_losses(cfg)) EXPECT_TRUE(std::isfinite(l));
}

void expect_scenario_error(const std::string& text, const std::vector<std::string>& wanted) {
  try {
    scenario::parse_scenario(text, "scenarios/t.yaml");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const scenario::ScenarioError& e) {
    for (const auto& w : wanted) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(ModulePrecision, UnknownModuleNamesInYamlAreRefused) {
  const std::string base = "name: t\nwhy: w\ndata: {batch_size: 8, seq_len: 32}\nstrategy: bf16-autocast\n";
  const auto ok =
      scenario::parse_scenario(base +
                                   "model: {kind: gpt, preset: micro, keep_fp32: [h.1.attn.c_proj, lm_head]}\n"
                                   "inject: [{kind: scale_weights, module: h.1.attn.c_proj, factor: 3000}]\n",
                               "scenarios/t.yaml");
  EXPECT_EQ(ok.run.model.keep_fp32, (std::vector<std::string>{"h.1.attn.c_proj", "lm_head"}));
  ASSERT_EQ(inject::injections(ok.run).size(), 1u);
  EXPECT_EQ(inject::injections(ok.run)[0].module, "h.1.attn.c_proj");
  expect_scenario_error(
      base + "model: {kind: gpt, preset: micro, keep_fp32: [blocks.1.attn.proj]}\n",
      {"scenarios/t.yaml:", "model.keep_fp32[0]", "'blocks.1.attn.proj' is not a module", "h.0.attn.c_proj", "HINT"});
  expect_scenario_error(base + "model: {kind: mlp, preset: tiny, keep_fp32: h.0}\n", {"model.keep_fp32", "list"});
  expect_scenario_error(base +
                            "model: {kind: mlp, preset: tiny}\n"
                            "inject: [{kind: scale_weights, module: h.0, factor: 10}]\n",
                        {"inject[0].module", "'h.0' is not a module", "embed, fc.0, head"});
}

}  // namespace
}  // namespace ampcheck
