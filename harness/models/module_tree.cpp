// Module trees of the models, the per-module precision policy (model.keep_fp32) and the non-finite watch.
#include "models/module_tree.h"

#include "models/model.h"

#include <ampcheck/amp/autocast.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ampcheck::models {

// ---------------------------------------------------------------------------------------------------------------
// trees

namespace {

// transformers' LlamaForCausalLM.named_modules(), in its order, less the containers model and model.layers and the
// modules without parameters (model.rotary_emb, mlp.act_fn) — as gpt's tree leaves out its ModuleList and GELU:
// model.embed_tokens; per layer model.layers.<l>, .self_attn, .self_attn.{q,k,v,o}_proj, .mlp,
// .mlp.{gate,up,down}_proj, .input_layernorm, .post_attention_layernorm; model.norm; lm_head (0 parameters where tied:
// embed_tokens owns them).
std::vector<ModuleInfo> llama_module_tree(const ModelConfig& cfg) {
  std::vector<ModuleInfo> tree;
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, I = cfg.mlp_hidden, H = cfg.n_head, K = cfg.n_kv_head;
  const int64_t D = C / std::max<int64_t>(1, H);
  const int64_t q = H * D * C, kv = K * D * C, o = C * H * D, attn = q + 2 * kv + o, mlp = 3 * I * C;
  tree.push_back({"model.embed_tokens", V * C});
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    tree.push_back({layer, attn + mlp + 2 * C});
    tree.push_back({layer + ".self_attn", attn});
    tree.push_back({layer + ".self_attn.q_proj", q});
    tree.push_back({layer + ".self_attn.k_proj", kv});
    tree.push_back({layer + ".self_attn.v_proj", kv});
    tree.push_back({layer + ".self_attn.o_proj", o});
    tree.push_back({layer + ".mlp", mlp});
    tree.push_back({layer + ".mlp.gate_proj", I * C});
    tree.push_back({layer + ".mlp.up_proj", I * C});
    tree.push_back({layer + ".mlp.down_proj", C * I});
    tree.push_back({layer + ".input_layernorm", C});
    tree.push_back({layer + ".post_attention_layernorm", C});
  }
  tree.push_back({"model.norm", C});
  tree.push_back({"lm_head", cfg.tie_embeddings == 1 ? 0 : V * C});
  return tree;
}

}  // namespace

std::vector<ModuleInfo> module_tree(const ModelConfig& cfg) {
  std::vector<ModuleInfo> tree;
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer;
  if (cfg.kind == "mlp") {
    tree.push_back({"embed", V * C});
    int64_t fan_in = C;
    for (int64_t l = 0; l < L; ++l) {
      tree.push_back({"fc." + std::to_string(l), cfg.mlp_hidden * fan_in + cfg.mlp_hidden});
      fan_in = cfg.mlp_hidden;
    }
    tree.push_back({"head", V * fan_in + V});
    return tree;
  }
  if (cfg.kind == "llama") return llama_module_tree(cfg);
  const int64_t ln = 2 * C, c_attn = 3 * C * C + 3 * C, attn_proj = C * C + C, c_fc = 4 * C * C + 4 * C,
                mlp_proj = 4 * C * C + C;
  tree.push_back({"wte", V * C});
  tree.push_back({"wpe", cfg.block_size * C});
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l);
    tree.push_back({h, 2 * ln + c_attn + attn_proj + c_fc + mlp_proj});
    tree.push_back({h + ".ln_1", ln});
    tree.push_back({h + ".attn", c_attn + attn_proj});
    tree.push_back({h + ".attn.c_attn", c_attn});
    tree.push_back({h + ".attn.c_proj", attn_proj});
    tree.push_back({h + ".ln_2", ln});
    tree.push_back({h + ".mlp", c_fc + mlp_proj});
    tree.push_back({h + ".mlp.c_fc", c_fc});
    tree.push_back({h + ".mlp.c_proj", mlp_proj});
  }
  tree.push_back({"ln_f", ln});
  tree.push_back({"lm_head", 0});  // tied: its weight is wte's
  return tree;
}

int module_index(const std::vector<ModuleInfo>& tree, const std::string& name) {
  for (size_t i = 0; i < tree.size(); ++i)
    if (tree[i].name == name) return static_cast<int>(i);
  return -1;
}

bool parameter_in_module(const std::string& param, const std::string& module) {
  return param == module ||
         (param.size() > module.size() && param.compare(0, module.size(), module) == 0 && param[module.size()] == '.');
}

// ---------------------------------------------------------------------------------------------------------------
// the policy

void ModulePolicy::configure(std::vector<ModuleInfo> tree, const std::vector<std::string>& keep_fp32) {
  tree_ = std::move(tree);
  kept_.assign(tree_.size(), false);
  parent_kept_.assign(tree_.size(), false);
  for (const auto& name : keep_fp32) {
    if (module_index(tree_, name) >= 0) continue;
    std::string known;
    for (const auto& m : tree_) known += (known.empty() ? "" : ", ") + m.name;
    throw std::invalid_argument("keep_fp32: '" + name + "' is not a module of the model (its modules: " + known + ")");
  }
  for (size_t i = 0; i < tree_.size(); ++i)
    for (const auto& name : keep_fp32) {
      if (parameter_in_module(tree_[i].name, name)) kept_[i] = true;
      if (tree_[i].name != name && parameter_in_module(tree_[i].name, name)) parent_kept_[i] = true;
    }
  any_kept_ = !keep_fp32.empty();
}

bool ModulePolicy::parameter_kept(const std::string& param) const {
  for (size_t i = 0; i < tree_.size(); ++i)
    if (kept_[i] && parameter_in_module(param, tree_[i].name)) return true;
  return false;
}

void ModulePolicy::record(int id, bool backward, const at::Tensor& t) {
  if (!watch_ || id < 0 || !t.defined() || !at::isFloatingType(t.scalar_type())) return;
  at::NoGradGuard no_grad;
  sums_.push_back(t.detach().sum(at::kFloat));  // inf / NaN anywhere -> a non-finite sum; no host read
  events_.emplace_back(id, backward);
}

NonfiniteWatch ModulePolicy::take() {
  NonfiniteWatch w;
  if (!sums_.empty()) {
    at::NoGradGuard no_grad;
    w.sums = at::stack(sums_);
  }
  w.events = std::move(events_);
  sums_.clear();
  events_.clear();
  return w;
}

FirstNonfinite first_nonfinite(const NonfiniteWatch& w, const std::vector<ModuleInfo>& tree) {
  if (!w.sums.defined()) return {};
  const at::Tensor host = w.sums.to(at::kCPU);  // SYNC POINT: only for a step already known non-finite
  const float* s = host.data_ptr<float>();
  for (size_t i = 0; i < w.events.size(); ++i) {
    if (std::isfinite(s[i])) continue;
    const auto [id, backward] = w.events[i];
    return {tree[static_cast<size_t>(id)].name, backward ? "backward" : "forward"};
  }
  return {};
}

// ---------------------------------------------------------------------------------------------------------------
// one module's region

class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType device)
      : guard_(device, at::autocast::get_autocast_dtype(device), /*enabled=*/false) {}

 private:
  amp::AutocastGuard guard_;
};

ModuleScope::ModuleScope(ModulePolicy& policy, int id, c10::DeviceType device)
    : policy_(policy), id_(id), kept_(policy.kept(id)) {
  if (kept_ && policy.kept_root(id) && at::autocast::is_autocast_enabled(device))
    no_autocast_ = std::make_unique<AutocastOff>(device);
}

ModuleScope::~ModuleScope() = default;

at::Tensor ModuleScope::in(const at::Tensor& x) {
  at::Tensor t = x;
  if (kept_ && t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat)
    t = t.to(at::kFloat);
  if (policy_.watching() && t.defined() && t.requires_grad() && at::isFloatingType(t.scalar_type())) {
    t = t.view_as(t);  // this module's own handle on its input: the hook sees the gradient this module gives back
    ModulePolicy* policy = &policy_;
    const int id = id_;
    t.register_hook([policy, id](const at::TensorBase& g) { policy->record(id, /*backward=*/true, at::Tensor(g)); });
  }
  return t;
}

at::Tensor ModuleScope::param(const at::Tensor& w) const {
  if (kept_) return w.scalar_type() != at::kFloat ? w.to(at::kFloat) : w;
  // a parameter kept fp32 by the module that owns it, used here where it is not kept (the tied lm_head's weight of a
  // kept wte) in a model cast whole: in the model's dtype, as an untied copy would be
  if (policy_.model_dtype != at::kFloat && w.scalar_type() == at::kFloat) return w.to(policy_.model_dtype);
  return w;
}

at::Tensor ModuleScope::out(const at::Tensor& y) {
  at::Tensor t = y;
  if (policy_.kept_root(id_) && policy_.model_dtype != at::kFloat && at::isFloatingType(t.scalar_type()) &&
      t.scalar_type() != policy_.model_dtype)
    t = t.to(policy_.model_dtype);
  policy_.record(id_, /*backward=*/false, t);
  return t;
}

}  // namespace ampcheck::models
