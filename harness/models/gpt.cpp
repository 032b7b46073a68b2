// Gpt implementation. Initialisation follows GPT-2 / nanoGPT: N(0, 0.02) weights, zero biases, unit LayerNorm
// weights, residual projections scaled by 1/sqrt(2 n_layer); all drawn from one CPU generator seeded by cfg.seed.
#include "models/gpt.h"

#include "kernels/fused.h"
#include "models/head_loss.h"
#include "kernels/gemm_epilogues.h"

#include <ampcheck/amp/autocast.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ampcheck::models {

namespace {
struct GptPreset {
  const char* name;
  int64_t n_layer, n_head, n_embd, block_size, vocab_size;
};
// vocab 50304 = GPT-2's 50257 padded to a multiple of 128 (as in nanoGPT / llm.c).
constexpr GptPreset kPresets[] = {
    {"micro", 2, 2, 32, 32, 128},    // ~30k params: unit tests, fractions of a millisecond a step
    {"nano", 4, 4, 128, 64, 256},    // ~0.84M params: CPU scenarios
    {"mini", 6, 6, 384, 256, 4096},  // ~12M params: quick GPU scenarios
    {"gpt2-124m", 12, 12, 768, 1024, 50304},
    {"gpt2-350m", 24, 16, 1024, 1024, 50304},
};
}  // namespace

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig resolve_gpt_preset(ModelConfig cfg) {
  const GptPreset* preset = nullptr;
  for (const auto& p : kPresets)
    if (cfg.preset == p.name) preset = &p;
  if (!preset) {
    std::string known;
    for (const auto& n : gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown gpt preset '" + cfg.preset + "' (expected one of: " + known + ")");
  }
  if (cfg.n_layer == 0) cfg.n_layer = preset->n_layer;
  if (cfg.n_head == 0) cfg.n_head = preset->n_head;
  if (cfg.n_embd == 0) cfg.n_embd = preset->n_embd;
  if (cfg.block_size == 0) cfg.block_size = preset->block_size;
  if (cfg.vocab_size == 0) cfg.vocab_size = preset->vocab_size;
  if (cfg.n_embd % cfg.n_head != 0)
    throw std::invalid_argument("gpt: n_embd (" + std::to_string(cfg.n_embd) + ") must be a multiple of n_head (" +
                                std::to_string(cfg.n_head) + ")");
  return cfg;
}

Gpt::Gpt(const ModelConfig& cfg) : cfg_(cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, T = cfg.block_size, L = cfg.n_layer;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto normal = [&](std::vector<int64_t> shape, double std) { return at::normal(0.0, std, shape, gen, opts); };
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(L));
  auto add = [&](const std::string& name, at::Tensor init, bool decay) {
    add_parameter(name, std::move(init), decay);
    return parameters().size() - 1;
  };
  wte_ = add("wte", normal({V, C}, 0.02), true);  // (V, C), also the LM head (tied)
  wpe_ = add("wpe", normal({T, C}, 0.02), true);  // (T, C)
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    Block b{};
    b.ln1_w = add(pre + "ln_1.weight", at::ones({C}, opts), false);
    b.ln1_b = add(pre + "ln_1.bias", at::zeros({C}, opts), false);
    b.attn_w = add(pre + "attn.c_attn.weight", normal({3 * C, C}, 0.02), true);  // (3C, C)
    b.attn_b = add(pre + "attn.c_attn.bias", at::zeros({3 * C}, opts), false);
    b.attn_proj_w = add(pre + "attn.c_proj.weight", normal({C, C}, proj_std), true);
    b.attn_proj_b = add(pre + "attn.c_proj.bias", at::zeros({C}, opts), false);
    b.ln2_w = add(pre + "ln_2.weight", at::ones({C}, opts), false);
    b.ln2_b = add(pre + "ln_2.bias", at::zeros({C}, opts), false);
    b.fc_w = add(pre + "mlp.c_fc.weight", normal({4 * C, C}, 0.02), true);  // (4C, C)
    b.fc_b = add(pre + "mlp.c_fc.bias", at::zeros({4 * C}, opts), false);
    b.fc_proj_w = add(pre + "mlp.c_proj.weight", normal({C, 4 * C}, proj_std), true);  // (C, 4C)
    b.fc_proj_b = add(pre + "mlp.c_proj.bias", at::zeros({C}, opts), false);
    blocks_.push_back(b);
  }
  lnf_w_ = add("ln_f.weight", at::ones({C}, opts), false);
  lnf_b_ = add("ln_f.bias", at::zeros({C}, opts), false);
  configure_modules(cfg);
}

int Gpt::site_module(int site) const {
  const int blocks = static_cast<int>(blocks_.size());
  constexpr int kSiteModule[4] = {3, 4, 7, 8};  // attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj
  if (site < 4 * blocks) return block_module(static_cast<size_t>(site / 4), kSiteModule[site % 4]);
  const int tail = site - 4 * blocks;  // 0 lm_head, 1 wte, 2 wpe
  return tail == 0 ? 3 + 9 * blocks : tail == 1 ? 0 : 1;
}

std::vector<std::string> Gpt::parameter_names(const ModelConfig& resolved) {
  std::vector<std::string> names = {"wte", "wpe"};
  for (int64_t l = 0; l < resolved.n_layer; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      names.push_back(pre + n);
  }
  names.push_back("ln_f.weight");
  names.push_back("ln_f.bias");
  return names;
}

double Gpt::training_flops_per_token(int64_t seq_len) const {
  // the position embedding is a lookup, not a matmul weight; the token embedding is (it is the tied LM head)
  const double matmul_weights = static_cast<double>(parameter_count() - parameters()[wpe_].tensor.numel());
  return 6.0 * matmul_weights + 12.0 * static_cast<double>(cfg_.n_layer * cfg_.n_embd * seq_len);
}

std::string Gpt::describe() const {
  std::ostringstream os;
  os << "gpt " << cfg_.preset << " (L=" << cfg_.n_layer << " H=" << cfg_.n_head << " C=" << cfg_.n_embd
     << " T=" << cfg_.block_size << " V=" << cfg_.vocab_size << "): " << Model::describe();
  return os.str();
}

std::vector<std::string> Gpt::matmul_sites() const {
  std::vector<std::string> sites;
  for (size_t l = 0; l < blocks_.size(); ++l)
    for (const char* n : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      sites.push_back("h." + std::to_string(l) + "." + n);
  sites.insert(sites.end(), {"lm_head", "wte", "wpe"});
  return sites;
}

// One Linear module: a kept one (model.keep_fp32) always takes the ATen path, in fp32
at::Tensor Gpt::linear(int site, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& wc,
                       const at::Tensor& bc) {
  ModuleScope s(policy(), site_module(site), device_type());
  if (s.kept()) return s.out(at::linear(s.in(x), s.param(w), b.defined() ? s.param(b) : b));
  const at::Tensor xi = s.in(x);
  if (MatmulOverride* o = matmul_override())
    if (at::Tensor y = o->linear(site, xi, w, b); y.defined()) return s.out(y);
  if (cfg_.gemm_epilogues && b.defined() && kernels::gemm_epilogues_apply(xi, w))
    return s.out(kernels::linear_epilogues(xi, w, b, kernels::Impl::Auto, wc, bc));
  if (cfg_.fused_bias_gelu && b.defined()) return s.out(kernels::linear_bias_gelu(xi, w, b, /*gelu=*/false));
  return s.out(at::linear(xi, s.param(w), b));  // (param: a tied weight kept fp32 by its owner, cast to the model's)
}

at::Tensor Gpt::embedding(int site, const at::Tensor& w, const at::Tensor& indices) {
  ModuleScope s(policy(), site_module(site), device_type());
  if (!s.kept())
    if (MatmulOverride* o = matmul_override())
      if (at::Tensor y = o->embedding(site, w, indices); y.defined()) return s.out(y);
  return s.out(at::embedding(s.param(w), indices));
}

void Gpt::cast_weights(const at::Tensor& like) {
  casts_.clear();
  if (!cfg_.gemm_epilogues || matmul_override() != nullptr || !kernels::gemm_epilogues_built() || !like.is_cuda())
    return;
  const at::ScalarType dt = cfg_.compute_dtype;  // the engine plan's: what the Linears compute in
  if (dt != at::kBFloat16 && dt != at::kHalf) return;
  std::vector<size_t> which;
  for (const Block& b : blocks_)
    which.insert(which.end(),
                 {b.attn_w, b.attn_b, b.attn_proj_w, b.attn_proj_b, b.fc_w, b.fc_b, b.fc_proj_w, b.fc_proj_b});
  if (cfg_.head_loss == HeadLoss::Fused) which.push_back(wte_);
  std::vector<at::Tensor> srcs;
  for (size_t i : which) {
    const at::Tensor& t = p(i);
    if (!t.is_cuda() || t.scalar_type() != at::kFloat || !t.is_contiguous()) return;  // e.g. model.half(): no casts
    srcs.push_back(t.detach());
  }
  std::vector<at::Tensor> out = kernels::cast_many(srcs, dt);
  casts_.assign(parameters().size(), at::Tensor());
  for (size_t k = 0; k < which.size(); ++k) casts_[which[k]] = std::move(out[k]);
}

const at::Tensor& Gpt::pc(size_t i) const {
  static const at::Tensor none;
  return i < casts_.size() ? casts_[i] : none;
}

at::Tensor Gpt::proj_bias_for(size_t bias, at::Tensor* proj_bias) {
  if (!proj_bias || matmul_override() != nullptr || cfg_.dropout > 0.0) return p(bias);
  *proj_bias = p(bias);
  return p(bias).detach();
}

// attention branch: proj(attn(h)) for the normalised input h (B, T, C)
at::Tensor Gpt::attention_branch(size_t l, const at::Tensor& h, at::Tensor* proj_bias) {
  const Block& b = blocks_[l];
  const int site = static_cast<int>(4 * l);
  const int64_t B = h.size(0), T = h.size(1), C = cfg_.n_embd, H = cfg_.n_head, D = C / H;
  const bool train_dropout = dropout_ > 0.0;
  ModuleScope s(policy(), block_module(l, 2), device_type());
  at::Tensor qkv = linear(site + 0, s.in(h), p(b.attn_w), p(b.attn_b), pc(b.attn_w), pc(b.attn_b));  // (B, T, 3C)
  auto parts = qkv.split(C, /*dim=*/2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };  // (B, H, T, D)
  at::Tensor q = heads(parts[0]);
  if (cfg_.attention_query_dtype == "fp16") q = q.to(at::kHalf);
  else if (cfg_.attention_query_dtype == "bf16")
    q = q.to(at::kBFloat16);
  at::Tensor y = at::scaled_dot_product_attention(q, heads(parts[1]), heads(parts[2]), {},
                                                  train_dropout ? dropout_ : 0.0, /*is_causal=*/true);
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  y = linear(site + 1, y, p(b.attn_proj_w), proj_bias_for(b.attn_proj_b, proj_bias), pc(b.attn_proj_w),
             pc(b.attn_proj_b));
  if (train_dropout) y = at::dropout(y, dropout_, true);
  return s.out(y);
}

// MLP branch: proj(gelu(fc(m))) for the normalised input m
at::Tensor Gpt::mlp_branch(size_t l, at::Tensor m, double mlp_spike, at::Tensor* proj_bias) {
  const Block& b = blocks_[l];
  const int site = static_cast<int>(4 * l);
  ModuleScope s(policy(), block_module(l, 6), device_type());
  m = s.in(m);
  // a kept c_fc or c_proj (model.keep_fp32) runs as its own ATen Linear
  const bool kept = policy().kept(block_module(l, 7)) || policy().kept(block_module(l, 8));
  if (mlp_spike == 1.0 && cfg_.gemm_epilogues && matmul_override() == nullptr && !kept &&
      kernels::gemm_epilogues_apply(m, p(b.fc_w))) {  // engine option: GELU and its backward in the GEMMs
    std::vector<at::Tensor> casts;
    if (!casts_.empty()) casts = {pc(b.fc_w), pc(b.fc_b), pc(b.fc_proj_w), pc(b.fc_proj_b)};
    m = kernels::mlp_gelu_epilogues(m, p(b.fc_w), p(b.fc_b), p(b.fc_proj_w), proj_bias_for(b.fc_proj_b, proj_bias),
                                    kernels::Impl::Auto, casts);
    if (dropout_ > 0.0) m = at::dropout(m, dropout_, true);
    return s.out(m);
  }
  if (mlp_spike != 1.0) {  // planted spike: (K m) W^T + K b, divided by K — exact for a power of two
    m = at::gelu(linear(site + 2, m * mlp_spike, p(b.fc_w), p(b.fc_b) * mlp_spike) / mlp_spike, "tanh");
  } else if (cfg_.fused_bias_gelu && matmul_override() == nullptr && !kept) {  // engine option: GELU's backward fused
    ModuleScope fc(policy(), block_module(l, 7), device_type());
    m = fc.out(kernels::linear_bias_gelu(fc.in(m), p(b.fc_w), p(b.fc_b), /*gelu=*/true));
  } else {
    m = at::gelu(linear(site + 2, m, p(b.fc_w), p(b.fc_b)), "tanh");
  }
  m = linear(site + 3, m, p(b.fc_proj_w), proj_bias_for(b.fc_proj_b, proj_bias));
  if (dropout_ > 0.0) m = at::dropout(m, dropout_, true);
  return s.out(m);
}

at::Tensor Gpt::block_forward(size_t l, const at::Tensor& x, double mlp_input_scale, double mlp_spike) {
  const Block& b = blocks_[l];
  ModuleScope s(policy(), block_module(l, 0), device_type());
  const at::Tensor x0 = s.in(x);
  // attention: x + proj(attn(ln_1(x)))
  at::Tensor x1 = x0 + attention_branch(l, layer_norm(block_module(l, 1), x0, b.ln1_w, b.ln1_b));
  // MLP: x + proj(gelu(fc(ln_2(x))))
  at::Tensor m = layer_norm(block_module(l, 5), x1, b.ln2_w, b.ln2_b);
  if (mlp_input_scale != 1.0) m = m * mlp_input_scale;  // planted event: overflows the fp16 c_fc matmul
  return s.out(x1 + mlp_branch(l, m, mlp_spike));
}

at::Tensor Gpt::layer_norm(int module, const at::Tensor& x, size_t weight, size_t bias) {
  ModuleScope s(policy(), module, device_type());
  return s.out(at::layer_norm(s.in(x), {cfg_.n_embd}, s.param(p(weight)), s.param(p(bias))));
}

// Engine option fused_layernorm: the same forward with every residual add fused into the LayerNorm after it
// (kernels::add_layer_norm): a block's MLP output is added by the next block's ln_1 (the last one's by ln_f). The
// branch's c_proj bias gradient comes from that LayerNorm's backward, which writes the branch's output gradient
// anyway (add_layer_norm's y_bias: no column-sum pass of its own).
constexpr double kLayerNormEps = 1e-5;  // at::layer_norm's default, which the stock path uses

// The engine plan applied the option where it can (no dropout, fp32 parameters, no attention-dtype pitfall); what
// only a forward knows stays here: a step with a planted activation event, and the stream's dtype (an FP8 embedding)
bool Gpt::fused_layernorm_applies(const at::Tensor& x, const ForwardOptions& opts) const {
  return cfg_.fused_layernorm && opts.hidden_scale == 1.0 && x.scalar_type() == at::kFloat;
}

at::Tensor Gpt::hidden_fused(at::Tensor x) {
  const at::ScalarType out = cfg_.compute_dtype;  // what the next Linear computes in (the engine plan's)
  const auto A = kernels::Impl::Auto;
  at::Tensor pending, pending_bias;  // the previous block's MLP output, not yet added to the residual stream; its bias
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    auto [x0, h] = kernels::add_layer_norm(x, pending, p(b.ln1_w), p(b.ln1_b), kLayerNormEps, out, A, pending_bias);
    at::Tensor attn_bias;
    at::Tensor y = attention_branch(l, h, &attn_bias);
    auto [x1, m] = kernels::add_layer_norm(x0, y, p(b.ln2_w), p(b.ln2_b), kLayerNormEps, out, A, attn_bias);
    pending_bias = at::Tensor();
    pending = mlp_branch(l, m, 1.0, &pending_bias);
    x = x1;
  }
  return kernels::add_layer_norm(x, pending, p(lnf_w_), p(lnf_b_), kLayerNormEps, out, A, pending_bias).second;
}

at::Tensor Gpt::hidden(const at::Tensor& inputs, const ForwardOptions& opts, TiedGradient* tied) {
  const int64_t T = inputs.size(1);
  dropout_ = opts.training ? cfg_.dropout : 0.0;  // evaluation runs without dropout, as model.eval() does
  TORCH_CHECK(T <= cfg_.block_size, "gpt: sequence length ", T, " exceeds block_size ", cfg_.block_size);
  at::Tensor pos = at::arange(T, inputs.options());
  const int head = lm_head_site();
  at::Tensor tok;
  if (tied) {  // (the engine plan applies the fused head only where wte and lm_head are not kept in fp32)
    ModuleScope s(policy(), site_module(head + 1), device_type());
    tok = s.out(tied_embedding(p(wte_), inputs, tied));
  } else {
    tok = embedding(head + 1, p(wte_), inputs);
  }
  at::Tensor x = tok + embedding(head + 2, p(wpe_), pos);  // (B, T, C)
  cast_weights(x);
  if (fused_layernorm_applies(x, opts)) return hidden_fused(x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const bool scaled_here = opts.hidden_scale != 1.0 && static_cast<int64_t>(l) == opts.hidden_scale_block;
    const bool at_mlp_input = scaled_here && opts.hidden_scale_at == ActivationSite::MlpInput;
    const bool spike = scaled_here && opts.hidden_scale_at == ActivationSite::MlpInputSpike;
    x = block_forward(l, x, at_mlp_input ? opts.hidden_scale : 1.0, spike ? opts.hidden_scale : 1.0);
    if (scaled_here && opts.hidden_scale_at == ActivationSite::Residual) x = x * opts.hidden_scale;
  }
  return layer_norm(site_module(head) - 1, x, lnf_w_, lnf_b_);  // ln_f: the module before lm_head
}

at::Tensor Gpt::logits(const at::Tensor& inputs, const ForwardOptions& opts) {
  at::Tensor out = linear(lm_head_site(), hidden(inputs, opts), p(wte_));  // (B, T, V), tied head
  casts_.clear();
  return out;
}

at::Tensor Gpt::loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts) {
  if (cfg_.head_loss == HeadLoss::Chunked) {  // engine option: the tied head fused with cross-entropy in chunks of rows
    at::Tensor h = hidden(inputs, opts);
    casts_.clear();
    return chunked_head_cross_entropy(h.reshape({-1, cfg_.n_embd}), p(wte_), targets.reshape({-1}),
                                      cfg_.head_chunk_rows);
  }
  if (cfg_.head_loss == HeadLoss::Fused) {  // engine option: the same with the gradients computed in the forward
    // the tied weight's two gradients in one tensor (not where a matmul override owns the lookup, e.g. FP8's)
    TiedGradient* tied = matmul_override() == nullptr ? &tied_ : nullptr;
    tied_.grad = at::Tensor();
    at::Tensor h = hidden(inputs, opts, tied);
    at::Tensor loss =
        fused_head_cross_entropy(h.reshape({-1, cfg_.n_embd}), p(wte_), targets.reshape({-1}), cfg_.head_chunk_rows,
                                 opts.loss_grad_scale, cfg_.gemm_epilogues, pc(wte_), tied, cfg_.compute_dtype);
    casts_.clear();
    return loss;
  }
  at::Tensor lg = logits(inputs, opts);  // (clears the casts)
  return at::cross_entropy_loss(lg.view({-1, lg.size(-1)}), targets.reshape({-1}));
}

}  // namespace ampcheck::models
