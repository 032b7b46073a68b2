// Llama — a Llama-style decoder as Hugging Face's LlamaForCausalLM computes it: token embedding, pre-RMSNorm blocks
// of causal self-attention with rotary position embeddings (RoPE) and grouped-query attention (n_kv_head key/value
// heads shared by n_head query heads), a SwiGLU MLP (down(silu(gate(x)) * up(x))), no biases, a final RMSNorm and an
// LM head that is its own weight or tied to the embedding. Parameters carry HF's names (model.embed_tokens,
// model.layers.<l>.self_attn.{q,k,v,o}_proj, .mlp.{gate,up,down}_proj, .input_layernorm, .post_attention_layernorm,
// model.norm, lm_head), so a state dict maps one to one onto transformers' (tested against it: llama_parity_test).
//
// Where the ecosystem's code carries a precision fix, the model has it by default and a PITFALL knob without it
// (models/model.h's llama fields): RMSNorm's variance in fp32, rotary angles in fp32 with autocast off, the attention
// softmax in fp32 (eager attention), the logits upcast before the cross-entropy. Precision policy otherwise lives in
// the engine (autocast, casts, FP8 through models::MatmulOverride), as for Gpt; the per-module policy
// (model.keep_fp32) and the non-finite watch see HF's module names (models::module_tree): each module's forward is a
// ModuleScope region, and a kept one computes on the ATen path in FP32.
// Presets: llama-micro (CPU scenarios, ~0.1M weights), llama-nano (~0.9M), llama-150m (GPU).
// Letters: B batch, T time, C channels, H query heads, K key/value heads, D head size, I MLP width, V vocab.
#pragma once

#include "models/model.h"

#include <utility>

namespace ampcheck::models {

ModelConfig resolve_llama_preset(ModelConfig cfg);
std::vector<std::string> llama_preset_names();

class Llama final : public Model {
 public:
  explicit Llama(const ModelConfig& cfg);
  at::Tensor loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts = {}) override;
  // logits (B, T, V) for inputs (B, T), in the head's compute dtype (not upcast)
  at::Tensor logits(const at::Tensor& inputs, const ForwardOptions& opts = {});
  std::string kind() const override { return "llama"; }
  std::string describe() const override;
  double training_flops_per_token(int64_t seq_len) const override;
  const ModelConfig& config() const { return cfg_; }
  // The parameter names a Llama of this resolved config registers, in HF's named_parameters() order, without
  // building it (a llama-150m is 600 MB of fp32 weights).
  static std::vector<std::string> parameter_names(const ModelConfig& resolved);
  // Sites of block l: 7*l + {0 q_proj, 1 k_proj, 2 v_proj, 3 o_proj, 4 gate_proj, 5 up_proj, 6 down_proj}, named
  // "model.layers.<l>.self_attn.q_proj", ...; then "lm_head" and the lookup "model.embed_tokens".
  std::vector<std::string> matmul_sites() const override;

 private:
  struct Block {  // indices into parameters()
    size_t q, k, v, o, gate, up, down, input_norm, post_norm;
  };
  struct BlockModules {  // indices into module_tree(): model.layers.<l> and its non-Linear regions
    int layer, self_attn, mlp, input_norm, post_norm;
  };
  const at::Tensor& p(size_t i) { return parameters()[i].tensor; }
  int64_t head_dim() const { return cfg_.n_embd / cfg_.n_head; }
  int lm_head_site() const { return static_cast<int>(7 * blocks_.size()); }
  const at::Tensor& head_weight() { return p(lm_head_); }
  c10::DeviceType device_type() const { return device().type(); }

  at::Tensor hidden(const at::Tensor& inputs, const ForwardOptions& opts);  // model.norm's output (B, T, C)
  at::Tensor block(size_t l, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                   const ForwardOptions& opts);                               // model.layers.<l>
  at::Tensor rms_norm(int module, const at::Tensor& x, const at::Tensor& w);  // module: its index in module_tree()
  // cos, sin (T, D) in `like`'s dtype, the angles computed in cfg.rope_dtype with autocast off
  std::pair<at::Tensor, at::Tensor> rotary(int64_t T, const at::Tensor& like) const;
  at::Tensor attention(size_t l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin);
  at::Tensor mlp(size_t l, const at::Tensor& m, double spike);
  at::Tensor linear(int site, const at::Tensor& x, const at::Tensor& w);
  at::Tensor embedding(int site, const at::Tensor& w, const at::Tensor& indices);

  ModelConfig cfg_;
  size_t embed_ = 0, norm_ = 0, lm_head_ = 0;  // lm_head_ == embed_ when tied
  std::vector<Block> blocks_;
  std::vector<BlockModules> block_modules_;
  std::vector<int> site_modules_;  // the module each matmul site computes (indexed like matmul_sites())
  int norm_module_ = -1;           // model.norm
  double dropout_ = 0.0;           // this forward's attention dropout: cfg_.dropout in training, 0 in evaluation
};

}  // namespace ampcheck::models
