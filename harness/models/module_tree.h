// The module tree of a model and what each module is allowed to do with precision: PyTorch's named_modules() for
// ampcheck's models (names are their parameters' prefixes: module "h.1.attn.c_proj" owns "h.1.attn.c_proj.weight"),
// the per-module precision policy `model.keep_fp32` (the listed modules and their children compute in FP32: autocast
// off inside them, their floating inputs cast to fp32, their parameters kept fp32 when the model is cast whole, their
// outputs cast back to the model's dtype there), and the non-finite watch: one 0-dim sum per module output (forward)
// and per module input gradient (backward), kept on the device in the order they happened, so the trainer can name
// the first module that held an inf / NaN without a host sync on an ordinary step.
//
// A model marks a module's region with a ModuleScope:   ModuleScope s(policy(), id);  x = s.in(x);  return s.out(y);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::models {

// One module, as PyTorch's named_modules() lists it (the root excluded).
struct ModuleInfo {
  std::string name;        // "h.1.attn.c_proj": its parameters are "h.1.attn.c_proj.weight" / ".bias"
  int64_t parameters = 0;  // elements of the parameters it and its children own (the tied lm_head: 0, wte owns them)
};
// The index of `name` in tree, or -1.
int module_index(const std::vector<ModuleInfo>& tree, const std::string& name);
// Whether the parameter `param` ("h.1.attn.c_proj.weight", "wte") belongs to module `module` or one of its children.
bool parameter_in_module(const std::string& param, const std::string& module);

// What one step's watch recorded: sums[i] (float, on the device) is the sum of module events[i].first's output
// (forward, events[i].second == false) or input gradient (backward), in the order they were computed. An inf / NaN
// anywhere in a tensor makes its sum non-finite (a finite tensor whose fp32 sum overflows would too: above ~1e38).
struct NonfiniteWatch {
  at::Tensor sums;                           // (events,) float; undefined when nothing was recorded
  std::vector<std::pair<int, bool>> events;  // (module index, backward)
};

// The first non-finite module of a watched step (read from the host: a SYNC POINT, for a step already known
// non-finite). module == "" when no module's output or input gradient held one.
struct FirstNonfinite {
  std::string module;
  std::string pass;  // "forward" | "backward"
};
FirstNonfinite first_nonfinite(const NonfiniteWatch& w, const std::vector<ModuleInfo>& tree);

class ModulePolicy {
 public:
  // keep_fp32: module names of tree; throws std::invalid_argument naming an unknown one and the known names.
  void configure(std::vector<ModuleInfo> tree, const std::vector<std::string>& keep_fp32);
  const std::vector<ModuleInfo>& tree() const { return tree_; }
  bool kept(int id) const { return id >= 0 && kept_[static_cast<size_t>(id)]; }
  // kept, and its parent is not: where the kept region starts (and its outputs are cast back)
  bool kept_root(int id) const { return kept(id) && !parent_kept_[static_cast<size_t>(id)]; }
  bool any_kept() const { return any_kept_; }
  bool parameter_kept(const std::string& param) const;
  int id(const std::string& name) const { return module_index(tree_, name); }

  // the watch: off by default (costs nothing); take() hands over and clears what a step recorded
  void set_watch(bool on) { watch_ = on; }
  bool watching() const { return watch_; }
  void record(int id, bool backward, const at::Tensor& t);
  NonfiniteWatch take();

  // what the model's parameters were cast to (Model::to): kept regions cast their outputs back to it
  at::ScalarType model_dtype = at::kFloat;

 private:
  std::vector<ModuleInfo> tree_;
  std::vector<bool> kept_, parent_kept_;
  bool any_kept_ = false;
  bool watch_ = false;
  std::vector<at::Tensor> sums_;
  std::vector<std::pair<int, bool>> events_;
};

// RAII: one module's forward region. Kept (model.keep_fp32): autocast off until the scope ends, in() casts floating
// tensors to fp32, out() casts the result back to the model's dtype at a kept region's root where the model is cast
// whole (bf16 / fp16 parameters); under autocast the output stays fp32, as PyTorch's autocast-disabled region gives.
// Watched: out() records the output's sum, in() a hook recording the input's gradient sum.
class AutocastOff;  // (module_tree.cpp: an amp::AutocastGuard with autocast disabled)
class ModuleScope {
 public:
  ModuleScope(ModulePolicy& policy, int id, c10::DeviceType device);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
  at::Tensor in(const at::Tensor& x);
  at::Tensor param(
      const at::Tensor& w) const;  // a parameter used inside: fp32 where kept (a tied weight), else the model dtype
  at::Tensor out(const at::Tensor& y);
  bool kept() const { return kept_; }

 private:
  ModulePolicy& policy_;
  int id_;
  bool kept_;
  std::unique_ptr<AutocastOff> no_autocast_;
};

}  // namespace ampcheck::models
