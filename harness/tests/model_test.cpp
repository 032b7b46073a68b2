// Models: parameter counts against the closed-form GPT-2 formula, deterministic initialisation, the initial loss
// of an untrained model, a forward pass that leaves the weights unchanged, and the dtype cast of `.half()`.
#include "models/gpt.h"
#include "models/mlp.h"

#include <gtest/gtest.h>

#include <ATen/core/grad_mode.h>

#include <cmath>

using namespace ampcheck::models;

namespace {
// GPT-2 parameter count with tied embeddings: V*C + T*C + L*(12 C^2 + 13 C) + 2 C
// (per block: qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C, fc_proj 4C^2+C, two LayerNorms 4C).
int64_t gpt2_formula(int64_t L, int64_t C, int64_t T, int64_t V) {
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

ModelConfig gpt(const std::string& preset) {
  ModelConfig c;
  c.kind = "gpt";
  c.preset = preset;
  return c;
}
}  // namespace

TEST(ModelGpt, ParameterCountsMatchTheGpt2Formula) {
  for (const auto& name : gpt_preset_names()) {
    if (name == "gpt2-350m") continue;  // same formula; 1.4 GB of fp32 init is not worth it in a unit test
    const ModelConfig cfg = resolve_preset(gpt(name));
    auto m = make_model(cfg);
    EXPECT_EQ(m->parameter_count(), gpt2_formula(cfg.n_layer, cfg.n_embd, cfg.block_size, cfg.vocab_size)) << name;
  }
}

TEST(ModelGpt, Gpt2SmallPresetHas124MParameters) {
  auto m = make_model(gpt("gpt2-124m"));
  // GPT-2 small with the vocab padded to 50304: 124,475,904 (124,439,808 with 50257).
  EXPECT_EQ(m->parameter_count(), 124475904);
}

TEST(ModelGpt, NanoPresetIsAboutOneMillionParameters) {
  auto m = make_model(gpt("nano"));
  EXPECT_GT(m->parameter_count(), 500000);
  EXPECT_LT(m->parameter_count(), 1500000);
}

TEST(ModelGpt, InitialisationIsDeterministicInTheSeed) {
  auto a = make_model(gpt("micro")), b = make_model(gpt("micro"));
  ModelConfig other = gpt("micro");
  other.seed = 7;
  auto c = make_model(other);
  for (size_t i = 0; i < a->parameters().size(); ++i)
    ASSERT_TRUE(at::equal(a->parameters()[i].tensor, b->parameters()[i].tensor)) << a->parameters()[i].name;
  EXPECT_FALSE(at::equal(a->parameters()[0].tensor, c->parameters()[0].tensor)) << "a different seed must change wte";
}

TEST(ModelGpt, OneUlpPerturbationMovesEveryWeightByOneUlp) {
  ModelConfig p = gpt("micro");
  p.init_perturb_ulps = 1;
  auto a = make_model(gpt("micro")), b = make_model(p);
  const at::Tensor w0 = a->parameters()[2].tensor, w1 = b->parameters()[2].tensor;
  EXPECT_TRUE(at::equal(at::nextafter(w0, at::full_like(w0, INFINITY)), w1));
}

TEST(ModelGpt, UntrainedLossIsCloseToLnVocab) {
  auto m = make_model(gpt("micro"));
  const int64_t V = resolve_preset(gpt("micro")).vocab_size;
  at::Tensor x = at::randint(V, {4, 16}, at::kLong), y = at::randint(V, {4, 16}, at::kLong);
  at::NoGradGuard no_grad;
  const double loss = m->loss(x, y).item<double>();
  // N(0, 0.02) weights give near-uniform logits: within 0.1 nat of ln V.
  EXPECT_NEAR(loss, std::log(static_cast<double>(V)), 0.1);
}

TEST(ModelGpt, ForwardAndBackwardLeaveWeightsUnchanged) {
  auto m = make_model(gpt("micro"));
  std::vector<at::Tensor> before;
  for (const auto& p : m->parameters()) before.push_back(p.tensor.detach().clone());
  at::Tensor x = at::randint(128, {2, 8}, at::kLong);
  m->loss(x, x).backward();
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_TRUE(at::equal(before[i], m->parameters()[i].tensor)) << m->parameters()[i].name;
    ASSERT_TRUE(m->parameters()[i].tensor.grad().defined()) << m->parameters()[i].name << " got no gradient";
  }
}

TEST(ModelGpt, HalfCastMakesFreshFp16Leaves) {
  auto m = make_model(gpt("micro"));
  m->to(at::Device(at::kCPU), at::kHalf);
  EXPECT_EQ(m->dtype(), at::kHalf);
  for (const auto& p : m->parameters()) {
    EXPECT_TRUE(p.tensor.is_leaf()) << p.name;
    EXPECT_TRUE(p.tensor.requires_grad()) << p.name;
  }
  EXPECT_NE(m->describe().find("Half"), std::string::npos) << m->describe();
}

TEST(ModelMlp, TrainsAndReportsItself) {
  ModelConfig c;
  c.kind = "mlp";
  c.preset = "tiny";
  auto m = make_model(c);
  EXPECT_NE(m->describe().find("mlp tiny"), std::string::npos);
  at::Tensor x = at::randint(128, {2, 8}, at::kLong);
  at::Tensor loss = m->loss(x, x);
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(ModelConfigErrors, UnknownPresetNamesTheKnownOnes) {
  try {
    resolve_preset(gpt("gpt5"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2-124m"), std::string::npos) << e.what();
  }
}
