// A scenario's inject: list (parsing.h; parse_injections is declared in scenario.cpp, its only caller: its types
// are inject's, which no header of harness/scenario includes).
#include "scenario/parsing.h"

#include "inject/injection.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

namespace ampcheck::scenario::parsing {

namespace {

// The model's parameter names, to check injection globs against, listed without building it (a gpt2-124m is 500 MB
// of weights, an mlp within the bounds up to 8 GB).
std::vector<std::string> model_parameter_names(const models::ModelConfig& m) {
  const models::ModelConfig resolved = models::resolve_preset(m);
  if (resolved.kind == "gpt") return models::Gpt::parameter_names(resolved);
  if (resolved.kind == "llama") return models::Llama::parameter_names(resolved);
  return models::Mlp::parameter_names(resolved);
}

// "gpt micro has 28: wte, wpe, h.0.ln_1.weight, ..., ln_f.bias": enough names to write a glob from.
std::string some_names(const models::ModelConfig& m, const std::vector<std::string>& names) {
  std::string out = m.kind + " " + m.preset + " has " + std::to_string(names.size()) + ":";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i == 6 && names.size() > 8) {
      out += " ...,";
      i = names.size() - 2;
    }
    out += " " + names[i] + (i + 1 < names.size() ? "," : "");
  }
  return out;
}

}  // namespace

void parse_injections(Fields& top, const engine::RunConfig& run, std::vector<inject::InjectionConfig>& out) {
  YAML::Node list = top.raw("inject");
  if (!list.IsDefined() || list.IsNull()) return;
  if (!list.IsSequence()) top.fail(list, "inject: expected a list of injections");
  const int64_t steps = run.loop.steps;
  const std::string step_range = "expected 0 <= step < train.steps (" + std::to_string(steps) + "), got ";
  std::vector<std::string> param_names;  // computed on the first grad injection
  for (size_t i = 0; i < list.size(); ++i) {
    Fields f(list[i], top.file(), "inject[" + std::to_string(i) + "]");
    // `params`: a glob that must match a parameter of the model
    auto params_glob = [&](Fields& fields) {
      const std::string glob = fields.str("params", "*");
      if (param_names.empty()) param_names = model_parameter_names(run.model);
      bool matched = false;
      for (const auto& name : param_names) matched = matched || inject::glob_match(glob, name);
      if (!matched)
        fields.fail_key("params", "'" + glob + "' matches no parameter of the model (expected a glob over its names; " +
                                      some_names(models::resolve_preset(run.model), param_names) + ")");
      return glob;
    };
    inject::InjectionConfig c;
    const std::string kind =
        f.choice("kind", "", {"grad", "activation", "underflow", "nan_loss", "bitflip", "scale_weights"});
    c.kind = kind == "grad"            ? inject::InjectionKind::GradValue
             : kind == "activation"    ? inject::InjectionKind::ActivationScale
             : kind == "underflow"     ? inject::InjectionKind::LossScale
             : kind == "bitflip"       ? inject::InjectionKind::BitFlip
             : kind == "scale_weights" ? inject::InjectionKind::ScaleWeights
                                       : inject::InjectionKind::NanLoss;
    if (c.kind == inject::InjectionKind::ScaleWeights) {  // at initialisation: no steps
      const models::ModelConfig m = models::resolve_preset(run.model);
      const std::vector<models::ModuleInfo> tree = models::module_tree(m);
      if (!f.has("module")) f.fail(list[i], "module: required for kind scale_weights (" + some_modules(m, tree) + ")");
      c.module = f.str("module", "");
      if (models::module_index(tree, c.module) < 0)
        f.fail_key("module", "'" + c.module + "' is not a module of the model (" + some_modules(m, tree) + ")");
      if (!f.has("factor")) f.fail(list[i], "factor: required for kind scale_weights");
      c.factor = f.num("factor", 1.0);
      if (c.factor == 0) f.fail_key("factor", "must be finite and non-zero");
      f.done();
      out.push_back(c);
      continue;
    }
    YAML::Node steps_node = f.raw("steps");
    if (f.has("from")) {
      c.from_step = f.integer("from", -1);
      if (c.from_step < 0 || c.from_step >= steps) f.fail_key("from", step_range + std::to_string(c.from_step));
    } else {
      f.raw("from");
    }
    if (steps_node.IsDefined() && !steps_node.IsNull()) {
      if (!steps_node.IsSequence()) f.fail_key("steps", "expected a list of step numbers");
      for (size_t j = 0; j < steps_node.size(); ++j) {
        const std::string field = "steps[" + std::to_string(j) + "]";
        const int64_t step = f.integer_at(steps_node[j], field);
        if (step < 0 || step >= steps) f.fail_at(steps_node[j], field, step_range + std::to_string(step));
        c.steps.push_back(step);
      }
    }
    if (c.steps.empty() && c.from_step < 0) f.fail(list[i], "needs steps: [..] and/or from: N (every step from N on)");
    if (c.kind == inject::InjectionKind::BitFlip) {  // one bit of one element: which tensor, element and bit
      c.flip_param = f.choice("target", "grad", {"grad", "param"}) == "param";
      c.params = params_glob(f);
      c.element = f.integer("element", 0);
      if (c.element < 0) f.fail_key("element", "must be >= 0");
      c.bit = f.integer("bit", 0);
      if (c.bit < 0 || c.bit > 63) f.fail_key("bit", "expected 0..63 (the element's size bounds it at run time)");
    }
    if (c.kind == inject::InjectionKind::GradValue) {
      std::string v = f.str("value", "inf");  // the one number that may be non-finite: it is the planted event
      if (v == "inf") c.value = INFINITY;
      else if (v == "-inf")
        c.value = -INFINITY;
      else if (v == "nan")
        c.value = NAN;
      else {
        try {
          c.value = std::stod(v);
        } catch (...) {
          f.fail_key("value", "expected inf, -inf, nan or a number, got '" + v + "'");
        }
      }
      c.params = params_glob(f);
      c.count = f.positive("count", 1);
    }
    if (c.kind == inject::InjectionKind::ActivationScale || c.kind == inject::InjectionKind::LossScale) {
      if (!f.has("factor")) f.fail(list[i], "factor: required for kind " + kind);
      c.factor = f.num("factor", 1.0);
      if (c.factor == 0) f.fail_key("factor", "must be finite and non-zero");
      if (c.kind == inject::InjectionKind::LossScale) c.compensate = f.boolean("compensate", true);
    }
    if (c.kind == inject::InjectionKind::ActivationScale) {
      const models::ModelConfig m = models::resolve_preset(run.model);
      c.block = f.integer("block", 0);
      if (c.block < 0 || c.block >= m.n_layer)
        f.fail_key("block", "expected 0 <= block < the model's " + std::to_string(m.n_layer) +
                                " blocks (n_layer), got " + std::to_string(c.block));
      const std::string at = f.choice("at", "residual", {"residual", "mlp_input", "mlp_input_spike"});
      c.at = at == "mlp_input"         ? models::ActivationSite::MlpInput
             : at == "mlp_input_spike" ? models::ActivationSite::MlpInputSpike
                                       : models::ActivationSite::Residual;
      if (c.at != models::ActivationSite::Residual && m.kind == "mlp")
        f.fail_key("at", at + " is a site of the gpt's and llama's blocks; the mlp model has only residual");
    }
    c.rank = f.integer("rank", -1);
    if (c.rank >= 0 && !run.distributed.enabled) f.fail_key("rank", "only for a data-parallel scenario (distributed:)");
    if (c.rank < -1 || c.rank >= run.distributed.world_size)
      f.fail_key("rank", "expected 0 <= rank < distributed.world_size (" + std::to_string(run.distributed.world_size) +
                             "), got " + std::to_string(c.rank));
    f.done();
    out.push_back(c);
  }
}

}  // namespace ampcheck::scenario::parsing
