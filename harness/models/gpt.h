// Gpt — a GPT-2-style decoder: token + position embeddings, pre-LayerNorm blocks of causal self-attention
// (through at::scaled_dot_product_attention, so flash / memory-efficient kernels are used where they apply) and a
// GELU(tanh) MLP, a final LayerNorm and a language-model head tied to the token embedding.
// Presets: micro (tests), nano (~1M), small-ish mini, gpt2-124m, gpt2-350m.
#pragma once

#include "models/head_loss.h"
#include "models/model.h"

namespace ampcheck::models {

ModelConfig resolve_gpt_preset(ModelConfig cfg);
std::vector<std::string> gpt_preset_names();

class Gpt final : public Model {
 public:
  explicit Gpt(const ModelConfig& cfg);
  at::Tensor loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts = {}) override;
  // logits (B, T, V) for inputs (B, T)
  at::Tensor logits(const at::Tensor& inputs, const ForwardOptions& opts = {});
  // the final LayerNorm's output (B, T, C): what the tied head multiplies
  at::Tensor hidden(const at::Tensor& inputs, const ForwardOptions& opts = {}) { return hidden(inputs, opts, nullptr); }
  std::string kind() const override { return "gpt"; }
  // The parameter names a Gpt of this (resolved) config registers, in order, without building it (scenario
  // parsing checks injection globs against them; a gpt2-124m would be 500 MB of weights).
  static std::vector<std::string> parameter_names(const ModelConfig& resolved);
  std::string describe() const override;
  double training_flops_per_token(int64_t seq_len) const override;
  const ModelConfig& config() const { return cfg_; }
  // Site i of block l is 4*l + {0: attn.c_attn, 1: attn.c_proj, 2: mlp.c_fc, 3: mlp.c_proj}; then lm_head, wte, wpe.
  std::vector<std::string> matmul_sites() const override;

 private:
  struct Block {  // indices into parameters()
    size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  };
  const at::Tensor& p(size_t i) { return parameters()[i].tensor; }
  double dropout_ = 0.0;  // this forward's dropout probability: cfg_.dropout in training, 0 in evaluation (hidden())
  // mlp_input_scale multiplies the LayerNorm output that feeds the MLP (ActivationSite::MlpInput); 1 = off.
  // mlp_spike multiplies c_fc's input and divides its output (ActivationSite::MlpInputSpike); 1 = off.
  at::Tensor block_forward(size_t l, const at::Tensor& x, double mlp_input_scale = 1.0, double mlp_spike = 1.0);
  // proj(attn(h)) and proj(gelu(fc(m))). proj_bias: where given (hidden_fused, no matmul override), c_proj runs with
  // its bias detached and *proj_bias is set to that bias: the add_layer_norm that consumes the branch gives its
  // gradient
  at::Tensor attention_branch(size_t l, const at::Tensor& h, at::Tensor* proj_bias = nullptr);
  at::Tensor mlp_branch(size_t l, at::Tensor m, double mlp_spike, at::Tensor* proj_bias = nullptr);
  // c_proj's bias as the branch passes it: detached where the add_layer_norm after the branch takes its gradient
  at::Tensor proj_bias_for(size_t bias, at::Tensor* proj_bias);
  bool fused_layernorm_applies(const at::Tensor& x, const ForwardOptions& opts) const;
  at::Tensor hidden_fused(at::Tensor x);
  // the stock LayerNorm of module `module` (ln_1, ln_2, ln_f) over the last dimension, parameters by index
  at::Tensor layer_norm(int module, const at::Tensor& x, size_t weight,
                        size_t bias);  // hidden() with the residual adds fused into the LayerNorms
  // hidden() whose token lookup is tied_embedding(…, tied) where `tied` is given (the fused head's tied path)
  at::Tensor hidden(const at::Tensor& inputs, const ForwardOptions& opts, TiedGradient* tied);
  // wc / bc: w and b precast to the compute dtype (cast_weights), for the GEMM-epilogue path
  at::Tensor linear(int site, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                    const at::Tensor& wc = {}, const at::Tensor& bc = {});
  // model.gemm_epilogues: the step's casts of the block Linears' weights and biases (and the tied head's weight where
  // the fused head runs) to the autocast dtype in one pass (kernels::cast_many), held in casts_ from hidden() until
  // loss() / logits() has used them; nothing where the option's GEMM path does not apply.
  void cast_weights(const at::Tensor& like);
  const at::Tensor& pc(size_t i) const;
  at::Tensor embedding(int site, const at::Tensor& w, const at::Tensor& indices);
  int lm_head_site() const { return static_cast<int>(4 * blocks_.size()); }
  // module indices (module_tree's order): block l's k-th module (0 h.l, 1 ln_1, 2 attn, 3 attn.c_attn, 4 attn.c_proj,
  // 5 ln_2, 6 mlp, 7 mlp.c_fc, 8 mlp.c_proj); the module a matmul site computes
  int block_module(size_t l, int k) const { return static_cast<int>(2 + 9 * l) + k; }
  int site_module(int site) const;
  c10::DeviceType device_type() const { return device().type(); }

  ModelConfig cfg_;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Block> blocks_;
  std::vector<at::Tensor> casts_;  // indexed like parameters(); empty, or undefined where not precast
  // model.head_loss: fused: the head's and the token embedding's gradients for wte meet in one tensor (head_loss.h)
  TiedGradient tied_;
};

}  // namespace ampcheck::models
