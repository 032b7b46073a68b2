// Model base: parameter registry, casting, presets and the factory.
#include "models/model.h"

#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

#include <ATen/core/grad_mode.h>

#include <sstream>
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

ModelConfig resolve_preset(ModelConfig cfg) {
  if (cfg.kind == "gpt") return resolve_gpt_preset(cfg);
  if (cfg.kind == "mlp") return resolve_mlp_preset(cfg);
  if (cfg.kind == "llama") return resolve_llama_preset(cfg);
  throw std::invalid_argument("unknown model kind '" + cfg.kind + "' (expected gpt, mlp or llama)");
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
