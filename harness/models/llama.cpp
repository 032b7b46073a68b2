// Llama implementation (llama.h). Initialisation follows transformers' LlamaPreTrainedModel: N(0, 0.02) for every
// Linear and the embedding (initializer_range), ones for the RMSNorm weights, no biases; all drawn from one CPU
// generator seeded by cfg.seed, in HF's parameter order.
#include "models/llama.h"

#include "models/head_loss.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace ampcheck::models {

namespace {
struct LlamaPreset {
  const char* name;
  int64_t n_layer, n_head, n_kv_head, n_embd, mlp_hidden, block_size, vocab_size;
};
// MLP widths: ~8/3 C rounded to a multiple of 16 (FP8's _scaled_mm needs every dimension a multiple of 16).
constexpr LlamaPreset kPresets[] = {
    {"llama-micro", 2, 4, 2, 64, 176, 64, 256},         // ~0.12M weights: CPU scenarios, milliseconds a step
    {"llama-nano", 4, 8, 4, 128, 352, 128, 512},        // ~0.86M weights: the nano scale on a CPU
    {"llama-150m", 16, 12, 4, 768, 2048, 1024, 32768},  // ~151M weights (50M of them embedding + head): GPU
};
constexpr double kDefaultRopeTheta = 10000.0;  // Llama 2's (Llama 3: 500000)
constexpr double kDefaultRmsEps = 1e-5;        // Llama 2's rms_norm_eps

// Autocast must not touch the rotary angles (HF: "with torch.autocast(enabled=False)"): its keys are excluded.
struct NoAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::autocast_dispatch_keyset};
};

at::ScalarType rope_scalar_type(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  return at::kFloat;
}

// (B, K, T, D) -> (B, K * n_rep, T, D): each key/value head shared by n_rep query heads (HF's repeat_kv)
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t B = x.size(0), K = x.size(1), T = x.size(2), D = x.size(3);
  return x.unsqueeze(2).expand({B, K, n_rep, T, D}).reshape({B, K * n_rep, T, D});
}

// cat(-x2, x1) of the two halves of the last dimension (HF's rotate_half)
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig resolve_llama_preset(ModelConfig cfg) {
  const LlamaPreset* preset = nullptr;
  for (const auto& p : kPresets)
    if (cfg.preset == p.name) preset = &p;
  if (!preset) {
    std::string known;
    for (const auto& n : llama_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown llama preset '" + cfg.preset + "' (expected one of: " + known + ")");
  }
  if (cfg.n_layer == 0) cfg.n_layer = preset->n_layer;
  if (cfg.n_head == 0) cfg.n_head = preset->n_head;
  if (cfg.n_kv_head == 0) cfg.n_kv_head = std::min(preset->n_kv_head, cfg.n_head);
  if (cfg.n_embd == 0) cfg.n_embd = preset->n_embd;
  if (cfg.mlp_hidden == 0) cfg.mlp_hidden = preset->mlp_hidden;
  if (cfg.block_size == 0) cfg.block_size = preset->block_size;
  if (cfg.vocab_size == 0) cfg.vocab_size = preset->vocab_size;
  if (cfg.rope_theta == 0) cfg.rope_theta = kDefaultRopeTheta;
  if (cfg.rms_norm_eps == 0) cfg.rms_norm_eps = kDefaultRmsEps;
  if (cfg.tie_embeddings < 0) cfg.tie_embeddings = 0;
  auto fail = [](const std::string& what) { throw std::invalid_argument("llama: " + what); };
  if (cfg.n_embd % cfg.n_head != 0 || (cfg.n_embd / cfg.n_head) % 2 != 0)
    fail("n_embd (" + std::to_string(cfg.n_embd) + ") must be n_head (" + std::to_string(cfg.n_head) +
         ") times an even head size (RoPE rotates pairs of channels)");
  if (cfg.n_kv_head <= 0 || cfg.n_head % cfg.n_kv_head != 0)
    fail("n_kv_head (" + std::to_string(cfg.n_kv_head) + ") must divide n_head (" + std::to_string(cfg.n_head) + ")");
  if (!(cfg.rope_theta > 1)) fail("rope_theta must be > 1");
  if (!(cfg.rms_norm_eps > 0)) fail("rms_norm_eps must be > 0");
  if (cfg.outlier_channels < 0 || cfg.outlier_channels > cfg.n_embd) fail("outlier_channels must be in [0, n_embd]");
  return cfg;
}

std::vector<std::string> Llama::parameter_names(const ModelConfig& r) {
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (int64_t l = 0; l < r.n_layer; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                          "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"})
      names.push_back(pre + n);
  }
  names.push_back("model.norm.weight");
  if (r.tie_embeddings != 1) names.push_back("lm_head.weight");
  return names;
}

Llama::Llama(const ModelConfig& cfg) : cfg_(resolve_llama_preset(cfg)) {
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, I = cfg_.mlp_hidden, D = head_dim();
  const int64_t H = cfg_.n_head, K = cfg_.n_kv_head;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg_.seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  constexpr double kInitStd = 0.02;  // LlamaConfig.initializer_range
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool matrix) {
    add_parameter(name, matrix ? at::normal(0.0, kInitStd, shape, gen, opts) : at::ones(shape, opts), matrix);
    return parameters().size() - 1;
  };
  embed_ = add("model.embed_tokens.weight", {V, C}, true);
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    Block b{};
    b.q = add(pre + "self_attn.q_proj.weight", {H * D, C}, true);
    b.k = add(pre + "self_attn.k_proj.weight", {K * D, C}, true);
    b.v = add(pre + "self_attn.v_proj.weight", {K * D, C}, true);
    b.o = add(pre + "self_attn.o_proj.weight", {C, H * D}, true);
    b.gate = add(pre + "mlp.gate_proj.weight", {I, C}, true);
    b.up = add(pre + "mlp.up_proj.weight", {I, C}, true);
    b.down = add(pre + "mlp.down_proj.weight", {C, I}, true);
    b.input_norm = add(pre + "input_layernorm.weight", {C}, false);
    b.post_norm = add(pre + "post_attention_layernorm.weight", {C}, false);
    blocks_.push_back(b);
  }
  norm_ = add("model.norm.weight", {C}, false);
  lm_head_ = cfg_.tie_embeddings == 1 ? embed_ : add("lm_head.weight", {V, C}, true);
  configure_modules(cfg_);  // model.keep_fp32 and the module tree (module_tree.h): each region looked up by name once
  for (const auto& site : matmul_sites()) site_modules_.push_back(policy().id(site));
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    block_modules_.push_back({policy().id(layer), policy().id(layer + ".self_attn"), policy().id(layer + ".mlp"),
                              policy().id(layer + ".input_layernorm"),
                              policy().id(layer + ".post_attention_layernorm")});
  }
  norm_module_ = policy().id("model.norm");
}

double Llama::training_flops_per_token(int64_t seq_len) const {
  // every weight is a matmul's but the embedding's (a lookup) — unless it is also the tied head
  double weights = static_cast<double>(parameter_count());
  if (cfg_.tie_embeddings != 1) weights -= static_cast<double>(parameters()[embed_].tensor.numel());
  return 6.0 * weights + 12.0 * static_cast<double>(cfg_.n_layer * cfg_.n_embd * seq_len);
}

std::string Llama::describe() const {
  std::ostringstream os;
  os << "llama " << cfg_.preset << " (L=" << cfg_.n_layer << " H=" << cfg_.n_head << " KV=" << cfg_.n_kv_head
     << " C=" << cfg_.n_embd << " I=" << cfg_.mlp_hidden << " T=" << cfg_.block_size << " V=" << cfg_.vocab_size
     << (cfg_.tie_embeddings == 1 ? " tied" : " untied") << " theta=" << cfg_.rope_theta
     << (cfg_.sdpa ? " sdpa" : " eager") << "): " << Model::describe();
  return os.str();
}

std::vector<std::string> Llama::matmul_sites() const {
  std::vector<std::string> sites;
  for (size_t l = 0; l < blocks_.size(); ++l)
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      sites.push_back("model.layers." + std::to_string(l) + "." + n);
  sites.insert(sites.end(), {"lm_head", "model.embed_tokens"});
  return sites;
}

// One Linear module (its site's): a kept one (model.keep_fp32) always takes the ATen path, in fp32
at::Tensor Llama::linear(int site, const at::Tensor& x, const at::Tensor& w) {
  ModuleScope s(policy(), site_modules_[static_cast<size_t>(site)], device_type());
  const at::Tensor xi = s.in(x);
  if (!s.kept())
    if (MatmulOverride* o = matmul_override())
      if (at::Tensor y = o->linear(site, xi, w, {}); y.defined()) return s.out(y);
  return s.out(at::linear(xi, s.param(w)));  // (param: a tied head's weight kept fp32 by embed_tokens, cast back)
}

at::Tensor Llama::embedding(int site, const at::Tensor& w, const at::Tensor& indices) {
  ModuleScope s(policy(), site_modules_[static_cast<size_t>(site)], device_type());
  if (!s.kept())
    if (MatmulOverride* o = matmul_override())
      if (at::Tensor y = o->embedding(site, w, indices); y.defined()) return s.out(y);
  return s.out(at::embedding(s.param(w), indices));
}

// ---------------------------------------------------------------------------------------------------------------
// the parts with a precision fix

// HF's LlamaRMSNorm: x / sqrt(mean(x^2) + eps) in fp32, rounded back to the input dtype, then times the weight.
// PITFALL (rmsnorm_fp32: false): the same in the input dtype: in fp16, x^2 is inf for |x| > 256, the variance inf,
// rsqrt 0 and the normalised row 0 — silently.
at::Tensor Llama::rms_norm(int module, const at::Tensor& x_in, const at::Tensor& w_in) {
  ModuleScope s(policy(), module, device_type());
  const at::Tensor x = s.in(x_in), w = s.param(w_in);
  const double eps = cfg_.rms_norm_eps;
  if (!cfg_.rmsnorm_fp32) return s.out(w * (x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps)));
  const at::Tensor h = x.to(at::kFloat);
  return s.out(w * (h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()));
}

// HF's LlamaRotaryEmbedding (default rope): inv_freq = theta^(-2i/D) in fp32, angles = position * inv_freq in fp32
// with autocast off, cos / sin cast to the hidden states' dtype. PITFALL (rope_dtype bf16 / fp16): positions,
// inv_freq and angles in that dtype — what a model cast whole with .to(bfloat16) computed when inv_freq was a buffer
// and the positions an arange of its dtype (transformers before 4.38): bf16 holds integers exactly only up to 256,
// and an angle of ~pos radians only to within pos * 2^-9.
std::pair<at::Tensor, at::Tensor> Llama::rotary(int64_t T, const at::Tensor& like) const {
  NoAutocast no_autocast;
  const at::ScalarType dt = rope_scalar_type(cfg_.rope_dtype);
  const int64_t D = head_dim();
  const auto f32 = like.options().dtype(at::kFloat);
  at::Tensor inv_freq = at::pow(cfg_.rope_theta, at::arange(0, D, 2, f32) / static_cast<double>(D)).reciprocal();
  at::Tensor pos = at::arange(T, like.options().dtype(dt));  // (T,)
  at::Tensor freqs = at::outer(pos, inv_freq.to(dt));        // (T, D/2) in dt
  at::Tensor emb = at::cat({freqs, freqs}, -1);              // (T, D)
  return {emb.cos().to(like.scalar_type()), emb.sin().to(like.scalar_type())};
}

// Causal self-attention with RoPE and GQA. HF's default (sdpa) or its eager_attention_forward: softmax in fp32 cast
// back to the query's dtype; PITFALL (softmax_fp32: false): softmax in the scores' dtype (autocast may still upcast
// it where it lists softmax: CUDA does, the CPU does not).
// A kept self_attn (model.keep_fp32) in a model cast whole takes its cos / sin in fp32 (rotary() again, for fp32): the
// model's are rounded to its dtype.
at::Tensor Llama::attention(size_t l, const at::Tensor& h_in, const at::Tensor& cos_in, const at::Tensor& sin_in) {
  const Block& b = blocks_[l];
  const int site = static_cast<int>(7 * l);
  ModuleScope s(policy(), block_modules_[l].self_attn, device_type());
  const at::Tensor h = s.in(h_in);
  const int64_t B = h.size(0), T = h.size(1), H = cfg_.n_head, K = cfg_.n_kv_head, D = head_dim();
  at::Tensor cos = cos_in, sin = sin_in;
  if (s.kept() && cos.scalar_type() != at::kFloat) std::tie(cos, sin) = rotary(T, h);
  auto heads = [&](const at::Tensor& t, int64_t n) { return t.view({B, T, n, D}).transpose(1, 2); };  // (B, n, T, D)
  at::Tensor q = heads(linear(site + 0, h, p(b.q)), H);
  at::Tensor k = heads(linear(site + 1, h, p(b.k)), K);
  at::Tensor v = heads(linear(site + 2, h, p(b.v)), K);
  q = q * cos + rotate_half(q) * sin;  // (type promotion as HF's: a bf16 q times fp32 cos is fp32)
  k = k * cos + rotate_half(k) * sin;
  k = repeat_kv(k, H / K);
  v = repeat_kv(v, H / K);
  at::Tensor y;  // (B, H, T, D)
  if (cfg_.sdpa) {
    y = at::scaled_dot_product_attention(q, k, v, {}, dropout_, /*is_causal=*/true);
  } else {
    at::Tensor scores = at::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));  // (B,H,T,T)
    at::Tensor future = at::ones({T, T}, scores.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(future, -INFINITY);
    at::Tensor w =
        cfg_.softmax_fp32 ? at::softmax(scores, -1, at::kFloat).to(q.scalar_type()) : at::softmax(scores, -1);
    if (dropout_ > 0.0) w = at::dropout(w, dropout_, true);
    y = at::matmul(w, v);
  }
  y = y.transpose(1, 2).reshape({B, T, H * D});
  return s.out(linear(site + 3, y, p(b.o)));
}

// SwiGLU: down(silu(gate(m)) * up(m)). spike != 1 (planted, ActivationSite::MlpInputSpike): gate's and up's inputs
// multiplied by it and their outputs divided by it — exact in FP32 for a power of two.
at::Tensor Llama::mlp(size_t l, const at::Tensor& m_in, double spike) {
  const Block& b = blocks_[l];
  const int site = static_cast<int>(7 * l);
  ModuleScope s(policy(), block_modules_[l].mlp, device_type());
  const at::Tensor m = s.in(m_in);
  at::Tensor in = spike != 1.0 ? m * spike : m;
  at::Tensor g = linear(site + 4, in, p(b.gate)), u = linear(site + 5, in, p(b.up));
  if (spike != 1.0) g = g / spike, u = u / spike;
  return s.out(linear(site + 6, at::silu(g) * u, p(b.down)));
}

// One decoder layer (HF's LlamaDecoderLayer): x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm)
at::Tensor Llama::block(size_t l, const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin,
                        const ForwardOptions& opts) {
  const Block& b = blocks_[l];
  const BlockModules& mods = block_modules_[l];
  ModuleScope s(policy(), mods.layer, device_type());
  const bool here = opts.hidden_scale != 1.0 && static_cast<int64_t>(l) == opts.hidden_scale_block;
  at::Tensor x = s.in(x_in);
  x = x + attention(l, rms_norm(mods.input_norm, x, p(b.input_norm)), cos, sin);
  at::Tensor m = rms_norm(mods.post_norm, x, p(b.post_norm));
  if (here && opts.hidden_scale_at == ActivationSite::MlpInput) m = m * opts.hidden_scale;  // planted overflow
  const bool spike = here && opts.hidden_scale_at == ActivationSite::MlpInputSpike;
  return s.out(x + mlp(l, m, spike ? opts.hidden_scale : 1.0));
}

at::Tensor Llama::hidden(const at::Tensor& inputs, const ForwardOptions& opts) {
  const int64_t T = inputs.size(1);
  TORCH_CHECK(T <= cfg_.block_size, "llama: sequence length ", T, " exceeds block_size ", cfg_.block_size);
  dropout_ = opts.training ? cfg_.dropout : 0.0;
  at::Tensor x = embedding(lm_head_site() + 1, p(embed_), inputs);  // (B, T, C)
  if (cfg_.outlier_channels > 0 && cfg_.outlier_scale != 1.0) {     // the model's outlier features (model.h)
    at::Tensor gain = at::ones({cfg_.n_embd}, x.options());
    gain.narrow(0, 0, cfg_.outlier_channels).fill_(cfg_.outlier_scale);
    x = x * gain;
  }
  auto [cos, sin] = rotary(T, x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    x = block(l, x, cos, sin, opts);
    const bool here = opts.hidden_scale != 1.0 && static_cast<int64_t>(l) == opts.hidden_scale_block;
    if (here && opts.hidden_scale_at == ActivationSite::Residual) x = x * opts.hidden_scale;
  }
  return rms_norm(norm_module_, x, p(norm_));
}

at::Tensor Llama::logits(const at::Tensor& inputs, const ForwardOptions& opts) {
  return linear(lm_head_site(), hidden(inputs, opts), head_weight());  // (B, T, V)
}

// HF's ForCausalLMLoss upcasts the logits (logits.float()) before the cross-entropy. PITFALL (logits_fp32: false):
// the cross-entropy on the logits as they are — in bf16 under a bf16 model, where the log-sum-exp over V and the
// loss itself are rounded to 8 bits (autocast upcasts cross_entropy itself, so under autocast nothing changes).
at::Tensor Llama::loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts) {
  if (cfg_.head_loss != HeadLoss::Stock) {  // engine options: the head fused with the cross-entropy (head_loss.h)
    at::Tensor h = hidden(inputs, opts).reshape({-1, cfg_.n_embd});
    if (cfg_.head_loss == HeadLoss::Chunked)
      return chunked_head_cross_entropy(h, head_weight(), targets.reshape({-1}), cfg_.head_chunk_rows);
    return fused_head_cross_entropy(h, head_weight(), targets.reshape({-1}), cfg_.head_chunk_rows, opts.loss_grad_scale,
                                    /*fp32_wgrad=*/false, {}, nullptr, cfg_.compute_dtype);
  }
  at::Tensor lg = logits(inputs, opts);
  if (cfg_.logits_fp32) lg = lg.to(at::kFloat);
  return at::cross_entropy_loss(lg.reshape({-1, lg.size(-1)}), targets.reshape({-1}));
}

}  // namespace ampcheck::models
