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

// Each module's count is the elements of the parameters named under it (a tied head: none, its weight is the
// embedding's); the top-level modules (inside no other) hold every parameter once: their counts sum to the model's,
// and every parameter lies in a module.
void expect_tree_covers_parameters(const models::Model& model) {
  const auto& tree = model.module_tree();
  int64_t top = 0;
  for (const auto& m : tree) {
    int64_t own = 0;
    for (const auto& p : model.parameters())
      if (models::parameter_in_module(p.name, m.name)) own += p.tensor.numel();
    EXPECT_EQ(m.parameters, own) << m.name << " of " << model.describe();
    const bool inside = std::any_of(tree.begin(), tree.end(), [&](const models::ModuleInfo& o) {
      return o.name != m.name && models::parameter_in_module(m.name, o.name);
    });
    if (!inside) top += m.parameters;
  }
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

// ---------------------------------------------------------------------------------------------------------------
// Llama: transformers' LlamaForCausalLM module names, the same policy and watch

models::ModelConfig llama_micro(const std::vector<std::string>& keep = {}, int tie = -1) {
  models::ModelConfig c;
  c.kind = "llama";
  c.preset = "llama-micro";
  c.tie_embeddings = tie;
  c.keep_fp32 = keep;
  return models::resolve_preset(c);
}

TEST(ModulePrecision, ModuleTreeNamesTheLlamaModulesAsNamedModules) {
  const std::vector<std::string> names = names_of(models::module_tree(llama_micro()));
  ASSERT_EQ(names.size(), 1u + 12u * 2u + 2u) << "embed_tokens, 12 per layer x 2 layers, norm, lm_head";
  const std::string l = "model.layers.1";
  const std::vector<std::string> layer1 = {l,
                                           l + ".self_attn",
                                           l + ".self_attn.q_proj",
                                           l + ".self_attn.k_proj",
                                           l + ".self_attn.v_proj",
                                           l + ".self_attn.o_proj",
                                           l + ".mlp",
                                           l + ".mlp.gate_proj",
                                           l + ".mlp.up_proj",
                                           l + ".mlp.down_proj",
                                           l + ".input_layernorm",
                                           l + ".post_attention_layernorm"};
  EXPECT_EQ(names.front(), "model.embed_tokens");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 13, names.begin() + 25), layer1);
  EXPECT_EQ(names[names.size() - 2], "model.norm");
  EXPECT_EQ(names.back(), "lm_head");
  for (const int tie : {0, 1}) {
    const models::ModelConfig cfg = llama_micro({}, tie);
    auto model = models::make_model(cfg);
    EXPECT_EQ(names_of(model->module_tree()), names_of(models::module_tree(cfg))) << "tie " << tie;
    expect_tree_covers_parameters(*model);
    EXPECT_EQ(model->module_tree().back().parameters, tie == 1 ? 0 : cfg.vocab_size * cfg.n_embd)
        << "lm_head: its own weight, or embed_tokens' where tied";
    for (const auto& site : model->matmul_sites())
      EXPECT_GE(models::module_index(model->module_tree(), site), 0) << "matmul site " << site << " is a module";
  }
  // GQA: k_proj and v_proj are n_kv_head x head size wide (llama-micro: 2 of 4 heads of 16)
  const auto tree = models::module_tree(llama_micro());
  EXPECT_EQ(tree[static_cast<size_t>(models::module_index(tree, "model.layers.0.self_attn.k_proj"))].parameters,
            2 * 16 * 64);
}

// keep_fp32 [model.layers.1.mlp.gate_proj] under bf16 autocast: gate_proj leaves the override (the ATen path runs it,
// in fp32) and its fp32 output makes down_proj's input silu(gate) * up fp32, where without the policy it is bf16.
TEST(ModulePrecision, KeptLlamaModuleComputesInFp32UnderBf16Autocast) {
  for (const bool keep : {false, true}) {
    const models::ModelConfig cfg =
        llama_micro(keep ? std::vector<std::string>{"model.layers.1.mlp.gate_proj"} : std::vector<std::string>{});
    auto model = models::make_model(cfg);
    SiteDtypes probe;
    probe.sites = model->matmul_sites();
    model->set_matmul_override(&probe);
    const at::Tensor tokens = at::randint(cfg.vocab_size, {2, 16}, at::kLong);
    amp::AutocastGuard autocast(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(std::isfinite(model->loss(tokens, tokens).item<double>()));
    EXPECT_EQ(probe.seen.count("model.layers.1.mlp.gate_proj"), keep ? 0u : 1u) << "a kept module takes the ATen path";
    ASSERT_EQ(probe.seen.count("model.layers.1.mlp.down_proj"), 1u);
    EXPECT_EQ(probe.seen["model.layers.1.mlp.down_proj"], keep ? at::kFloat : at::kBFloat16) << "keep " << keep;
    EXPECT_EQ(probe.seen["model.layers.0.mlp.down_proj"], at::kBFloat16) << "layer 0 is not kept";
  }
}

double loss_of(models::Model& model, const at::Tensor& tokens) { return model.loss(tokens, tokens).item<double>(); }

// In FP32 the policy changes nothing: kept modules (an attention with its rotary angles, a Linear, the final norm, the
// head) give the unkept model's loss and gradients bit for bit — the same ops on the same fp32 tensors. Under bf16
// autocast, every top-level module kept is the FP32 computation (1e-6 relative: the same ops in the same order, a
// test does not promise bits), where plain autocast is not.
TEST(ModulePrecision, KeptLlamaModulesComputeTheFp32Forward) {
  const at::Tensor tokens = at::randint(256, {2, 32}, at::kLong);
  auto plain = models::make_model(llama_micro());
  auto kept = models::make_model(llama_micro(
      {"model.embed_tokens", "model.layers.0.self_attn", "model.layers.1.mlp.down_proj", "model.norm", "lm_head"}));
  const at::Tensor a = plain->loss(tokens, tokens), b = kept->loss(tokens, tokens);
  EXPECT_EQ(a.item<double>(), b.item<double>()) << "fp32: keeping modules in FP32 is no change";
  a.backward();
  b.backward();
  for (size_t i = 0; i < plain->parameters().size(); ++i)
    EXPECT_TRUE(at::equal(plain->parameters()[i].tensor.grad(), kept->parameters()[i].tensor.grad()))
        << plain->parameters()[i].name;

  const double fp32 = loss_of(*plain, tokens);
  auto all = models::make_model(
      llama_micro({"model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"}));
  amp::AutocastGuard autocast(at::kCPU, at::kBFloat16);
  EXPECT_NEAR(loss_of(*all, tokens), fp32, 1e-6 * std::abs(fp32)) << "every top-level module kept";
  EXPECT_GT(std::abs(loss_of(*plain, tokens) - fp32), 1e-5) << "bf16 autocast alone differs (the test can fail)";
}

// Under a model cast whole to bf16 a kept layer keeps fp32 parameters, computes in fp32 (its attention with fp32
// rotary angles) and hands the next layer a bf16 output; every parameter gets its gradient.
TEST(ModulePrecision, KeptLlamaLayerKeepsFp32ParametersUnderPureBf16) {
  const models::ModelConfig cfg = llama_micro({"model.layers.0"});
  auto model = models::make_model(cfg);
  model->to(at::kCPU, at::kBFloat16);
  for (const auto& p : model->parameters())
    EXPECT_EQ(p.tensor.scalar_type(), p.name.rfind("model.layers.0.", 0) == 0 ? at::kFloat : at::kBFloat16) << p.name;
  SiteDtypes probe;
  probe.sites = model->matmul_sites();
  model->set_matmul_override(&probe);
  const at::Tensor tokens = at::randint(cfg.vocab_size, {2, 16}, at::kLong);
  const at::Tensor loss = model->loss(tokens, tokens);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  EXPECT_EQ(probe.seen.count("model.layers.0.self_attn.q_proj"), 0u) << "kept: the ATen path";
  EXPECT_EQ(probe.seen["model.layers.1.self_attn.q_proj"], at::kBFloat16) << "the kept layer's output is cast back";
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
}

// The planted module fault in a llama: the last layer's down_proj x 1e8 overflows fp16 in the forward; every step is
// skipped and the first non-finite module is named by its HF name.
TEST(ModulePrecision, PlantedLlamaFaultOverflowsFp16AndIsNamedFirst) {
  engine::RunConfig fp16 = micro_run("fp16-autocast", 4);
  fp16.model = llama_micro();
  inject::set_injections(fp16, {scale_weights("model.layers.1.mlp.down_proj", 1e8)});
  engine::Trainer t(fp16, at::kCPU);
  const engine::RunOutcome out = t.run();
  int64_t skipped = 0;
  for (const auto& row : t.trajectory().rows) skipped += row[trajectory::kSkipped] > 0 ? 1 : 0;
  EXPECT_EQ(skipped, 4) << "every step skipped for the overflow";
  EXPECT_EQ(out.first_nonfinite_step, 0);
  EXPECT_EQ(out.first_nonfinite_module, "model.layers.1.mlp.down_proj");
  EXPECT_EQ(out.first_nonfinite_pass, "forward");
  // kept in FP32, the same fault trains: no step skipped for it
  fp16.model.keep_fp32 = {"model.layers.1.mlp.down_proj"};
  engine::Trainer k(fp16, at::kCPU);
  EXPECT_EQ(k.run().first_nonfinite_module, "") << "keeping the planted module in FP32 stops its overflow";
}

// The fused head covers a llama's lm_head (and its embedding where tied); FP8 matmuls its block Linears: the engine
// plan leaves each kept one to the ATen path and says so.
TEST(ModulePrecision, EnginePlanRefusesLlamaFastPathsForKeptModules) {
  auto plan_for = [](const std::string& strategy, const std::vector<std::string>& keep, int tie) {
    engine::RunConfig cfg = micro_run(strategy, 3);
    cfg.model = llama_micro(keep, tie);
    cfg.model.head_loss = models::HeadLoss::Fused;
    return std::make_pair(cfg, engine::resolve_engine_plan(cfg, at::kCPU, false));
  };
  const auto [cfg, head] = plan_for("bf16-autocast", {"lm_head"}, 0);
  ASSERT_NE(head.find("model.head_loss"), nullptr);
  EXPECT_FALSE(head.find("model.head_loss")->applied);
  EXPECT_NE(head.find("model.head_loss")->note.find("keep_fp32 keeps lm_head"), std::string::npos) << head.describe();
  const auto tied = plan_for("bf16-autocast", {"model.embed_tokens"}, 1).second;
  EXPECT_FALSE(tied.find("model.head_loss")->applied) << "tied: the head's weight is the kept embedding's";
  EXPECT_NE(tied.find("model.head_loss")->note.find("model.embed_tokens"), std::string::npos) << tied.describe();
  EXPECT_TRUE(plan_for("bf16-autocast", {"model.embed_tokens"}, 0).second.find("model.head_loss")->applied)
      << "untied: the embedding is no part of the head";
  const auto fp8 = plan_for("fp8", {"model.layers.0.self_attn"}, 0).second;
  int refused = 0;
  for (const auto& d : fp8.decisions)
    if (d.option == "strategy.fp8" && !d.applied && d.label.find("model.layers.0.self_attn.") != std::string::npos)
      ++refused;
  EXPECT_EQ(refused, 4) << "q, k, v, o_proj: " << fp8.describe();
  // and the run trains, the kept head on the ATen path
  for (double l : testing::cpu_losses(cfg)) EXPECT_TRUE(std::isfinite(l));
}

TEST(ModulePrecision, LlamaModuleNamesInYamlAreAccepted) {
  const std::string base = "name: t\nwhy: w\ndata: {batch_size: 8, seq_len: 32}\nstrategy: fp16-autocast\n";
  const auto ok = scenario::parse_scenario(
      base +
          "model: {kind: llama, preset: llama-micro, keep_fp32: [model.layers.1.self_attn, lm_head]}\n"
          "inject: [{kind: scale_weights, module: model.layers.1.mlp.down_proj, factor: 1.0e8}]\n",
      "scenarios/t.yaml");
  EXPECT_EQ(ok.run.model.keep_fp32, (std::vector<std::string>{"model.layers.1.self_attn", "lm_head"}));
  ASSERT_EQ(inject::injections(ok.run).size(), 1u);
  EXPECT_EQ(inject::injections(ok.run)[0].module, "model.layers.1.mlp.down_proj");
  expect_scenario_error(base + "model: {kind: llama, preset: llama-micro, keep_fp32: [h.1.attn.c_proj]}\n",
                        {"model.keep_fp32[0]", "'h.1.attn.c_proj' is not a module", "model.embed_tokens",
                         "HINT: a module's name is its parameters' prefix: model.layers.0.mlp.down_proj"});
}

}  // namespace
}  // namespace ampcheck
