// Our Llama against transformers' LlamaForCausalLM (harness/tests/oracle/llama_hf.py, the installed transformers)
// built from the same config and the same weights: forward logits and every parameter's gradient after one
// backward, both in FP32 (one Python process computes transformers' side of both configurations). The engine's
// parameter names are HF's state-dict names, so the export is the parameter list itself (the script loads it strictly).
// Also: the names a config registers are the ones parameter_names() lists.
#include "engine/checkpoint.h"
#include "models/llama.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>
#include <unistd.h>

using namespace ampcheck;

namespace {

models::ModelConfig small_llama(int64_t n_kv_head, bool tied, double theta, bool sdpa) {
  models::ModelConfig cfg;
  cfg.kind = "llama";
  cfg.preset = "llama-micro";
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_kv_head = n_kv_head;
  cfg.n_embd = 32;
  cfg.mlp_hidden = 48;
  cfg.block_size = 32;
  cfg.vocab_size = 96;
  cfg.rope_theta = theta;
  cfg.tie_embeddings = tied ? 1 : 0;
  cfg.sdpa = sdpa;
  return models::resolve_preset(cfg);
}

// max |got - want| over max |want| (0 where want is all zero)
double relative_max_error(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? err / scale : err;
}

// The two configurations compared (one transformers process answers both: its import is most of the test's time).
std::vector<models::ModelConfig> parity_configs() {
  return {small_llama(/*n_kv_head=*/2, /*tied=*/false, 10000.0, /*sdpa=*/true),
          small_llama(/*n_kv_head=*/4, /*tied=*/true, 500000.0, /*sdpa=*/false)};
}

// The model with its weights randomised, and a batch: the same every call (fixed generators).
struct ParityCase {
  std::unique_ptr<models::Model> model;
  at::Tensor inputs, targets;
};
ParityCase make_case(const models::ModelConfig& cfg) {
  ParityCase c{models::make_model(cfg), {}, {}};
  {
    // HF's init (N(0, 0.02), unit norms) keeps activations near zero, where a wrong rotation or a swapped gate / up
    // hides below fp32 noise: randomise everything to O(1) scale
    at::NoGradGuard no_grad;
    at::Generator init = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto& p : c.model->parameters()) {
      const bool matrix = p.tensor.dim() == 2;
      const double std = matrix ? 1.0 / std::sqrt(static_cast<double>(p.tensor.size(1))) : 0.5;
      p.tensor.copy_(at::normal(0.0, std, p.tensor.sizes(), init) + (matrix ? 0.0 : 1.0));
    }
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  c.inputs = at::randint(cfg.vocab_size, {3, 29}, gen, at::kLong);
  c.targets = at::randint(cfg.vocab_size, {3, 29}, gen, at::kLong);
  return c;
}

// transformers' side of every parity config, computed once per test process (llama_hf.py IN OUT [IN OUT ...]);
// empty with *error set when the script failed.
const std::vector<engine::Checkpoint>& hf_outputs(std::string* error) {
  static std::vector<engine::Checkpoint> outputs;
  static std::string failure;
  static bool done = false;
  if (!done) {
    done = true;
    const auto configs = parity_configs();
    const std::string dir = ::testing::TempDir(), tag = std::to_string(getpid());
    std::vector<std::string> ins, outs;
    std::string cmd = std::string(AMPCHECK_PYTHON) + " " + AMPCHECK_TESTS_DIR + "/oracle/llama_hf.py";
    for (size_t i = 0; i < configs.size(); ++i) {
      const models::ModelConfig& cfg = configs[i];
      ParityCase c = make_case(cfg);
      std::vector<std::pair<std::string, at::Tensor>> ts = {{"inputs", c.inputs}, {"targets", c.targets}};
      for (const auto& p : c.model->parameters()) ts.emplace_back("model/" + p.name, p.tensor.detach());
      ins.push_back(dir + "/llama_hf_in_" + tag + "_" + std::to_string(i));
      outs.push_back(dir + "/llama_hf_out_" + tag + "_" + std::to_string(i));
      engine::write_checkpoint(ins.back(), ts,
                               {{"n_layer", cfg.n_layer},
                                {"n_head", cfg.n_head},
                                {"n_kv_head", cfg.n_kv_head},
                                {"n_embd", cfg.n_embd},
                                {"mlp_hidden", cfg.mlp_hidden},
                                {"block_size", cfg.block_size},
                                {"vocab_size", cfg.vocab_size},
                                {"rope_theta", cfg.rope_theta},
                                {"rms_norm_eps", cfg.rms_norm_eps},
                                {"tie_embeddings", cfg.tie_embeddings},
                                {"attention", cfg.sdpa ? "sdpa" : "eager"}});
      cmd += " " + ins.back() + " " + outs.back();
    }
    if (std::system(cmd.c_str()) != 0) failure = "transformers' side failed: " + cmd;
    else
      for (const auto& out : outs) outputs.push_back(engine::read_checkpoint(out));
    for (const auto& f : ins) std::remove(f.c_str());
    for (const auto& f : outs) std::remove(f.c_str());
  }
  *error = failure;
  return outputs;
}

void expect_matches_transformers(size_t which) {
  const models::ModelConfig cfg = parity_configs().at(which);
  std::string error;
  const auto& all = hf_outputs(&error);
  ASSERT_TRUE(error.empty()) << error;
  const auto& hf = all.at(which);
  ParityCase c = make_case(cfg);
  auto& model = c.model;
  const at::Tensor &inputs = c.inputs, &targets = c.targets;
  auto* llama = dynamic_cast<models::Llama*>(model.get());
  ASSERT_NE(llama, nullptr);
  at::Tensor logits;
  {
    at::NoGradGuard no_grad;
    logits = llama->logits(inputs);
  }
  at::Tensor loss = model->loss(inputs, targets);
  loss.backward();
  // Both sides are FP32 computing the same function in different orders (fused SDPA or HF's eager matmuls, our
  // rotate-half concatenation, GQA by expand): each output differs by rounding only. FP32's eps is 1.2e-7; a logit
  // is a chain of ~10 reductions over <= 48 terms, so a few hundred eps of the tensor's largest magnitude bounds
  // it: 2e-5 for the logits and the loss. The gradients go back through the same chain twice (one more softmax and
  // its Jacobian): 1e-4 of each gradient's largest magnitude — the bound the GPT oracle test uses against float64.
  // (Measured here: 0 and 0 — bit for bit, the same LibTorch CPU kernels in the same order; the bounds are for
  // other machines and kernel choices, never assumed bit-identical.) A wrong rotation, swapped gate/up, a missing
  // GQA repeat or an untied/tied mix-up moves them by O(1).
  const double logit_err = relative_max_error(logits, hf.tensors.at("logits"));
  EXPECT_LE(logit_err, 2e-5) << "logits: max |ours - HF| / max |HF| = " << logit_err;
  const double want_loss = hf.tensors.at("loss").item<double>();
  EXPECT_NEAR(loss.item<double>(), want_loss, 2e-5 * want_loss);
  size_t compared = 0;
  double worst_grad = 0;
  std::string worst_name;
  for (const auto& p : model->parameters()) {
    auto it = hf.tensors.find("grad/" + p.name);
    ASSERT_NE(it, hf.tensors.end()) << p.name << ": HF's Llama has no parameter of this name";
    const double err = relative_max_error(p.tensor.grad(), it->second);
    EXPECT_LE(err, 1e-4) << "grad of " << p.name << ": max |ours - HF| / max |HF| = " << err;
    if (err >= worst_grad) worst_grad = err, worst_name = p.name;
    ++compared;
  }
  std::cout << "  logits: max |ours - HF| / max |HF| = " << logit_err << " (bound 2e-5); worst gradient: " << worst_name
            << " " << worst_grad << " (bound 1e-4)\n";
  EXPECT_EQ(compared + 2, hf.tensors.size()) << "every HF gradient compared (beside the loss and the logits)";
}

}  // namespace

// parity_configs()[0]: GQA (2 KV heads of 4), untied, SDPA; [1]: MHA, tied, eager attention, rope theta 500000
TEST(ModelLlamaParity, GqaUntiedSdpaMatchesTransformersLlamaForCausalLM) { expect_matches_transformers(0); }

TEST(ModelLlamaParity, MhaTiedEagerLongThetaMatchesTransformersLlamaForCausalLM) { expect_matches_transformers(1); }

TEST(ModelLlama, ParameterNamesAreTheRegisteredOnesInHfOrder) {
  for (bool tied : {false, true}) {
    const models::ModelConfig cfg = small_llama(2, tied, 10000.0, true);
    auto model = models::make_model(cfg);
    std::vector<std::string> built;
    for (const auto& p : model->parameters()) built.push_back(p.name);
    EXPECT_EQ(built, models::Llama::parameter_names(cfg)) << (tied ? "tied" : "untied");
    EXPECT_EQ(built.back(), tied ? "model.norm.weight" : "lm_head.weight");
  }
}

TEST(ModelLlama, PresetsResolveAndRejectAnImpossibleGrouping) {
  for (const auto& name : models::preset_names("llama")) {
    models::ModelConfig cfg;
    cfg.kind = "llama";
    cfg.preset = name;
    const auto r = models::resolve_preset(cfg);
    EXPECT_EQ(r.n_head % r.n_kv_head, 0) << name;
    EXPECT_EQ(r.n_embd % 16, 0) << name << ": FP8 needs multiples of 16";
    EXPECT_EQ(r.mlp_hidden % 16, 0) << name;
  }
  models::ModelConfig bad;
  bad.kind = "llama";
  bad.preset = "llama-micro";
  bad.n_kv_head = 3;  // does not divide 4 heads
  EXPECT_THROW(models::resolve_preset(bad), std::invalid_argument);
}
