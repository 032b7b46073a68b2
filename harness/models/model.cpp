// Model base: parameter registry, casting, presets and the factory.
#include "models/model.h"

#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <sstream>
#include <utility>
#include <stdexcept>

namespace ampcheck::models {

std::vector<at::Tensor> Model::parameter_tensors() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.tensor);
  return out;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.tensor.numel();
  return n;
}

double Model::training_flops_per_token(int64_t) const { return 6.0 * static_cast<double>(parameter_count()); }

std::string Model::describe() const {
  std::ostringstream os;
  os << kind() << ", " << parameter_count() << " parameters (" << params_.size() << " tensors), "
     << c10::toString(dtype()) << " on " << device();
  return os.str();
}

void Model::to(at::Device device, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    const at::ScalarType dt = policy_.parameter_kept(p.name) ? at::kFloat : dtype;  // model.keep_fp32
    at::Tensor moved = p.tensor.detach().to(device, dt, /*non_blocking=*/false, /*copy=*/true);
    p.tensor = moved.requires_grad_(true);
  }
  policy_.model_dtype = dtype;
}

void Model::configure_modules(const ModelConfig& resolved) {
  policy_.configure(models::module_tree(resolved), resolved.keep_fp32);
}

at::Tensor& Model::add_parameter(std::string name, at::Tensor init_fp32_cpu, bool decay) {
  params_.push_back({std::move(name), init_fp32_cpu.contiguous().requires_grad_(true), decay});
  return params_.back().tensor;
}

namespace {
// a model's dimensions after its preset filled the zeros: each at least 1 (vocab 2), or nothing can be built from it —
// a negative n_layer used to build an mlp whose head ran under module index 0 (embed's)
void check_dimensions(const ModelConfig& r) {
  auto at_least = [&](const char* field, int64_t v, int64_t least) {
    if (v < least)
      throw std::invalid_argument(r.kind + ": " + field + " must be at least " + std::to_string(least) + ", got " +
                                  std::to_string(v));
  };
  at_least("n_layer", r.n_layer, 1);
  at_least("n_embd", r.n_embd, 1);
  at_least("vocab_size", r.vocab_size, 2);
  at_least("block_size", r.block_size, 1);
  if (r.kind != "mlp") at_least("n_head", r.n_head, 1);
  if (r.kind != "gpt") at_least("mlp_hidden", r.mlp_hidden, 1);
  if (r.kind == "llama") at_least("n_kv_head", r.n_kv_head, 1);
  if (r.head_chunk_rows < 0) at_least("head_chunk_rows", r.head_chunk_rows, 0);
}
}  // namespace

ModelConfig resolve_preset(ModelConfig cfg) {
  for (const auto& [field, v] : {std::pair<const char*, int64_t>{"n_layer", cfg.n_layer},
                                 {"n_embd", cfg.n_embd},
                                 {"n_head", cfg.n_head},
                                 {"n_kv_head", cfg.n_kv_head},
                                 {"mlp_hidden", cfg.mlp_hidden},
                                 {"vocab_size", cfg.vocab_size},
                                 {"block_size", cfg.block_size}})
    if (v < 0)  // before the presets' own checks divide by them
      throw std::invalid_argument(cfg.kind + ": " + field + " must be >= 0 (0 = the preset's), got " +
                                  std::to_string(v));
  ModelConfig r;
  if (cfg.kind == "gpt") r = resolve_gpt_preset(cfg);
  else if (cfg.kind == "mlp")
    r = resolve_mlp_preset(cfg);
  else if (cfg.kind == "llama")
    r = resolve_llama_preset(cfg);
  else
    throw std::invalid_argument("unknown model kind '" + cfg.kind + "' (expected gpt, mlp or llama)");
  check_dimensions(r);
  return r;
}

double parameter_count(const ModelConfig& r) {
  const double L = static_cast<double>(r.n_layer), C = static_cast<double>(r.n_embd),
               V = static_cast<double>(r.vocab_size), T = static_cast<double>(r.block_size),
               I = static_cast<double>(r.mlp_hidden);
  if (r.kind == "mlp")  // embed (V, C); fc.0 (I, C) + I; fc.l (I, I) + I; head (V, fan_in) + V
    return V * C + (L >= 1 ? I * C + I + (L - 1) * (I * I + I) : 0.0) + V * (L >= 1 ? I : C) + V;
  if (r.kind == "llama") {  // embed (V, C); per layer q, o (C, C), k, v (K·D, C), gate, up, down (I, C), 2 norms; norm
    const double D = static_cast<double>(r.n_embd / std::max<int64_t>(1, r.n_head)),
                 K = static_cast<double>(r.n_kv_head), H = static_cast<double>(r.n_head);
    const double layer = 2 * H * D * C + 2 * K * D * C + 3 * I * C + 2 * C;
    return V * C + L * layer + C + (r.tie_embeddings == 1 ? 0.0 : V * C);
  }
  // gpt: wte (V, C), wpe (T, C); per block 2 LayerNorms, c_attn (3C, C) + 3C, c_proj (C, C) + C, c_fc (4C, C) + 4C,
  // mlp c_proj (C, 4C) + C; ln_f
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

std::vector<std::string> preset_names(const std::string& kind) {
  if (kind == "llama") return llama_preset_names();
  return kind == "mlp" ? mlp_preset_names() : gpt_preset_names();
}

bool in_block(const std::string& name) { return name.rfind("h.", 0) == 0 || name.rfind("model.layers.", 0) == 0; }

bool is_lookup_site(const std::string& site) { return site == "wte" || site == "wpe" || site == "model.embed_tokens"; }

std::unique_ptr<Model> make_model(const ModelConfig& raw) {
  ModelConfig cfg = resolve_preset(raw);
  std::unique_ptr<Model> model;
  if (cfg.kind == "gpt") model = std::make_unique<Gpt>(cfg);
  else if (cfg.kind == "llama")
    model = std::make_unique<Llama>(cfg);
  else
    model = std::make_unique<Mlp>(cfg);
  if (cfg.init_perturb_ulps != 0) {
    // One-ulp perturbation for the FP32 noise spread: w <- nextafter(w, +inf) applied |n| times (sign picks direction).
    at::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      at::Tensor t = p.tensor;
      double dir = cfg.init_perturb_ulps > 0 ? INFINITY : -INFINITY;
      for (int i = 0; i < static_cast<int>(std::abs(cfg.init_perturb_ulps)); ++i)
        t.copy_(at::nextafter(t, at::full_like(t, dir)));
    }
  }
  return model;
}

const char* head_loss_name(HeadLoss h) {
  switch (h) {
    case HeadLoss::Stock:
      return "stock";
    case HeadLoss::Chunked:
      return "chunked";
    case HeadLoss::Fused:
      return "fused";
  }
  return "?";
}

HeadLoss parse_head_loss(const std::string& name) {
  for (HeadLoss h : {HeadLoss::Stock, HeadLoss::Chunked, HeadLoss::Fused})
    if (name == head_loss_name(h)) return h;
  throw std::invalid_argument("head_loss: expected stock, chunked or fused, got '" + name + "'");
}

}  // namespace ampcheck::models
