// Our GPT against an independent float64 PyTorch implementation (harness/tests/oracle/gpt_oracle.py, explicit
// attention instead of SDPA): same weights, same batch; loss and every parameter's gradient must agree. This is
// what proves the model is GPT-2's architecture (pre-LN, causal attention, tanh-GELU, tied head), llm.c style.
#include "engine/checkpoint.h"
#include "models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <gtest/gtest.h>

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

using namespace ampcheck;

TEST(ModelGptOracle, LossAndEveryGradientMatchAFloat64PyTorchImplementation) {
  models::ModelConfig cfg;
  cfg.kind = "gpt";
  cfg.preset = "micro";
  cfg = models::resolve_preset(cfg);
  auto model = models::make_model(cfg);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  {
    // GPT-2's init (N(0, 0.02), zero biases, unit norms) keeps every activation near zero, where most mistakes
    // (wrong GELU, a missing bias, a swapped norm) hide below fp32 noise. Randomise everything to O(1) scale.
    at::NoGradGuard no_grad;
    at::Generator init = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto& p : model->parameters()) {
      const double std = p.tensor.dim() == 2 ? 1.0 / std::sqrt(static_cast<double>(p.tensor.size(1))) : 0.5;
      p.tensor.copy_(at::normal(0.0, std, p.tensor.sizes(), init) +
                     (p.name.find("ln_") != std::string::npos && p.name.find("weight") != std::string::npos));
    }
  }
  at::Tensor inputs = at::randint(cfg.vocab_size, {3, 17}, gen, at::kLong);
  at::Tensor targets = at::randint(cfg.vocab_size, {3, 17}, gen, at::kLong);

  std::vector<std::pair<std::string, at::Tensor>> ts = {{"inputs", inputs}, {"targets", targets}};
  for (const auto& p : model->parameters()) ts.emplace_back("model/" + p.name, p.tensor.detach());
  const std::string dir = ::testing::TempDir(), in = dir + "/gpt_oracle_in_" + std::to_string(getpid()),
                    out = dir + "/gpt_oracle_out_" + std::to_string(getpid());
  engine::write_checkpoint(in, ts, {{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head}, {"n_embd", cfg.n_embd}});
  const std::string cmd =
      std::string(AMPCHECK_PYTHON) + " " + AMPCHECK_TESTS_DIR + "/oracle/gpt_oracle.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd;
  const auto ref = engine::read_checkpoint(out);

  at::Tensor loss = model->loss(inputs, targets);
  loss.backward();
  // fp32 against fp64 over a few hundred-term sums: relative 1e-5 on the loss (fp32 eps 1.2e-7 times the depth of
  // the reductions), and per tensor a max-abs error of 1e-4 of that gradient's largest magnitude.
  const double want_loss = ref.tensors.at("loss").item<double>();
  EXPECT_NEAR(loss.item<double>(), want_loss, 1e-5 * want_loss);
  for (const auto& p : model->parameters()) {
    const at::Tensor want = ref.tensors.at("grad/" + p.name);
    const at::Tensor got = p.tensor.grad().to(at::kDouble);
    const double scale = want.abs().max().item<double>();
    const double err = (got - want).abs().max().item<double>();
    EXPECT_LE(err, 1e-4 * scale + 1e-12) << p.name << ": max |got - want| = " << err << ", max |want| = " << scale;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}
