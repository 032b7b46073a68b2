// A scenario's strategy: (parsing.h).
#include "scenario/parsing.h"

#include <stdexcept>

namespace ampcheck::scenario::parsing {

void parse_strategy(Fields& top, engine::Strategy& s) {
  YAML::Node n = top.raw("strategy");
  if (!n.IsDefined() || n.IsNull()) top.fail(n, "strategy: required (one of: fp32, tf32, fp16-autocast, ...)");
  auto preset = [&](const std::string& name, const YAML::Node& at) {
    try {
      return engine::strategy_preset(name);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(where(top.file(), at) + ": strategy: " + e.what());
    }
  };
  if (n.IsScalar()) {
    s = preset(n.Scalar(), n);
    return;
  }
  Fields f(n, top.file(), "strategy");
  s = preset(f.str("preset", "fp32"), n);
  auto dtype = [&](const std::string& key, at::ScalarType d) {
    std::string v = f.str(key, engine::dtype_name(d));
    try {
      return engine::parse_dtype(v);
    } catch (const std::invalid_argument& e) {
      f.fail_key(key, e.what());
    }
  };
  s.param_dtype = dtype("params", s.param_dtype);
  std::string ac = f.str("autocast", s.autocast ? engine::dtype_name(*s.autocast) : "off");
  if (ac == "off" || ac == "none") s.autocast.reset();
  else {
    try {
      s.autocast = engine::parse_dtype(ac);
    } catch (const std::invalid_argument& e) {
      f.fail_key("autocast", e.what());
    }
  }
  if (s.autocast == at::kFloat) f.fail_key("autocast", "autocast dtype must be fp16, bf16 or off");
  if (f.has("scaler")) {
    Fields sc = f.map("scaler");
    std::string kind = sc.choice("kind",
                                 s.scaler.kind == engine::ScalerKind::Dynamic  ? "dynamic"
                                 : s.scaler.kind == engine::ScalerKind::Static ? "static"
                                                                               : "none",
                                 {"none", "static", "dynamic"});
    s.scaler.kind = kind == "dynamic"  ? engine::ScalerKind::Dynamic
                    : kind == "static" ? engine::ScalerKind::Static
                                       : engine::ScalerKind::None;
    s.scaler.init_scale = sc.num("init_scale", s.scaler.init_scale);
    s.scaler.growth_factor = sc.num("growth_factor", s.scaler.growth_factor);
    s.scaler.backoff_factor = sc.num("backoff_factor", s.scaler.backoff_factor);
    s.scaler.growth_interval = sc.positive("growth_interval", s.scaler.growth_interval);
    if (!(s.scaler.init_scale > 0)) sc.fail_key("init_scale", "must be > 0");
    if (!(s.scaler.growth_factor > 1)) sc.fail_key("growth_factor", "must be > 1.0 (as PyTorch's GradScaler)");
    if (!(s.scaler.backoff_factor < 1)) sc.fail_key("backoff_factor", "must be < 1.0 (as PyTorch's GradScaler)");
    sc.done();
  } else {
    f.raw("scaler");
  }
  if (f.has("fp8")) {
    Fields e = f.map("fp8");
    engine::Fp8Config c = s.fp8.value_or(engine::Fp8Config{});
    const std::string scaling =
        e.choice("scaling", engine::fp8_scaling_name(c.scaling), {"current", "delayed", "none"});
    c.scaling = scaling == "delayed" ? engine::Fp8Scaling::Delayed
                : scaling == "none"  ? engine::Fp8Scaling::None
                                     : engine::Fp8Scaling::Current;
    c.hybrid = e.choice("grads", c.hybrid ? "e5m2" : "e4m3", {"e5m2", "e4m3"}) == "e5m2";
    c.history = e.bounded("history", c.history, kMaxFp8History, "a bound on memory: an amax buffer per cast");
    c.margin = e.integer("margin", c.margin);
    if (c.margin < 0 || c.margin > 16) e.fail_key("margin", "expected 0..16 (the scale is divided by 2^margin)");
    c.layers = e.choice("layers", c.layers, {"blocks", "blocks+head", "all"});
    e.done();
    s.fp8 = c;
    if (!s.autocast) s.autocast = at::kBFloat16;
    // the variant names itself, so reports group runs by what they ran (fp8-delayed-h16-e4m3grads, ...)
    std::string name = c.scaling == engine::Fp8Scaling::Delayed ? "fp8-delayed"
                       : c.scaling == engine::Fp8Scaling::None  ? "fp8-unscaled"
                                                                : "fp8";
    if (c.scaling == engine::Fp8Scaling::Delayed && c.history != 16) name += "-h" + std::to_string(c.history);
    if (c.margin != 0) name += "-m" + std::to_string(c.margin);
    if (!c.hybrid) name += "-e4m3grads";
    if (c.layers != "blocks") name += c.layers == "all" ? "-all" : "-head";
    s.name = name;
  } else {
    f.raw("fp8");
  }
  s.master_weights = f.boolean("master_weights", s.master_weights);
  s.tf32 = f.boolean("tf32", s.tf32);
  s.deterministic = f.boolean("deterministic", s.deterministic);
  if (s.master_weights && s.param_dtype == at::kFloat) f.fail_key("master_weights", "needs params fp16 or bf16");
  if (s.fp8 && s.autocast != at::kBFloat16)
    f.fail_key("autocast", "FP8 matmuls run beside bf16 autocast: expected bf16");
  if (s.fp8 && s.param_dtype != at::kFloat)
    f.fail_key("params", "FP8 keeps fp32 parameters as the master weights: expected fp32");
  f.done();
}

}  // namespace ampcheck::scenario::parsing
