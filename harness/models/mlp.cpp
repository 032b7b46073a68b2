// Mlp implementation: Kaiming-uniform-like N(0, 1/sqrt(fan_in)) weights from one seeded CPU generator.
#include "models/mlp.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ampcheck::models {

namespace {
struct MlpPreset {
  const char* name;
  int64_t n_layer, n_embd, mlp_hidden, vocab_size, block_size;
};
constexpr MlpPreset kPresets[] = {
    {"tiny", 1, 32, 64, 128, 32},     // ~14k params
    {"small", 2, 128, 512, 256, 64},  // ~0.4M params
};
}  // namespace

std::vector<std::string> mlp_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig resolve_mlp_preset(ModelConfig cfg) {
  const MlpPreset* preset = nullptr;
  for (const auto& p : kPresets)
    if (cfg.preset == p.name) preset = &p;
  if (!preset) throw std::invalid_argument("unknown mlp preset '" + cfg.preset + "' (expected tiny or small)");
  if (cfg.n_layer == 0) cfg.n_layer = preset->n_layer;
  if (cfg.n_embd == 0) cfg.n_embd = preset->n_embd;
  if (cfg.mlp_hidden == 0) cfg.mlp_hidden = preset->mlp_hidden;
  if (cfg.vocab_size == 0) cfg.vocab_size = preset->vocab_size;
  if (cfg.block_size == 0) cfg.block_size = preset->block_size;
  return cfg;
}

Mlp::Mlp(const ModelConfig& cfg) : cfg_(cfg) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto normal = [&](std::vector<int64_t> shape, double std) { return at::normal(0.0, std, shape, gen, opts); };
  add_parameter("embed", normal({cfg.vocab_size, cfg.n_embd}, 1.0), true);  // (V, C)
  int64_t fan_in = cfg.n_embd;
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string pre = "fc." + std::to_string(l) + ".";
    add_parameter(pre + "weight", normal({cfg.mlp_hidden, fan_in}, 1.0 / std::sqrt(double(fan_in))), true);
    add_parameter(pre + "bias", at::zeros({cfg.mlp_hidden}, opts), false);
    fan_in = cfg.mlp_hidden;
  }
  add_parameter("head.weight", normal({cfg.vocab_size, fan_in}, 1.0 / std::sqrt(double(fan_in))), true);
  add_parameter("head.bias", at::zeros({cfg.vocab_size}, opts), false);
  configure_modules(cfg);
}

std::vector<std::string> Mlp::parameter_names(const ModelConfig& resolved) {
  std::vector<std::string> names = {"embed"};
  for (int64_t l = 0; l < resolved.n_layer; ++l) {
    names.push_back("fc." + std::to_string(l) + ".weight");
    names.push_back("fc." + std::to_string(l) + ".bias");
  }
  names.push_back("head.weight");
  names.push_back("head.bias");
  return names;
}

double Mlp::training_flops_per_token(int64_t) const {
  // the token embedding (parameters()[0]) is a lookup, not a matmul weight
  return 6.0 * static_cast<double>(parameter_count() - parameters()[0].tensor.numel());
}

std::string Mlp::describe() const {
  std::ostringstream os;
  os << "mlp " << cfg_.preset << " (depth=" << cfg_.n_layer << " C=" << cfg_.n_embd << " hidden=" << cfg_.mlp_hidden
     << " V=" << cfg_.vocab_size << "): " << Model::describe();
  return os.str();
}

at::Tensor Mlp::loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts) {
  const auto& ps = parameters();
  const c10::DeviceType dev = device().type();
  // modules (module_tree): 0 embed, 1 + l fc.<l> (its Linear and GELU), 1 + depth head
  at::Tensor x;
  {
    ModuleScope s(policy(), 0, dev);
    x = s.out(at::embedding(s.param(ps[0].tensor), inputs));  // (B, T, C)
  }
  size_t i = 1;
  for (int64_t l = 0; l < cfg_.n_layer; ++l, i += 2) {
    ModuleScope s(policy(), static_cast<int>(1 + l), dev);
    x = s.out(at::gelu(at::linear(s.in(x), s.param(ps[i].tensor), s.param(ps[i + 1].tensor))));  // (B, T, hidden)
    if (opts.hidden_scale != 1.0 && l == opts.hidden_scale_block) x = x * opts.hidden_scale;
  }
  ModuleScope s(policy(), static_cast<int>(1 + cfg_.n_layer), dev);
  const at::Tensor logits = s.out(at::linear(s.in(x), s.param(ps[i].tensor), s.param(ps[i + 1].tensor)));  // (B, T, V)
  return at::cross_entropy_loss(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace ampcheck::models
