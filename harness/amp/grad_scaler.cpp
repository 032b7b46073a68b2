// GradScaler implementation: a line-by-line port of torch/amp/grad_scaler.py (PyTorch 2.11). Comments name the
// Python method each block mirrors; the ATen kernels (_amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_) are the very ones Python calls, so the arithmetic is identical by construction.
#include <ampcheck/amp/grad_scaler.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Logging.h>

#include <iostream>

namespace ampcheck::amp {
namespace {

using PyType = GradScalerError::PythonType;

[[noreturn]] void raise(PyType type, const std::string& message) { throw GradScalerError(type, message); }

std::string device_key(const c10::Device& d) { return d.str(); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// __init__
GradScaler::GradScaler(c10::DeviceType device, GradScalerOptions options)
    : device_(device),
      enabled_(options.enabled),
      init_scale_(options.init_scale),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval) {
  if (device_ == c10::DeviceType::CUDA && enabled_ && !at::hasCUDA()) {
    std::cerr << "UserWarning: torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.\n";
    enabled_ = false;
  }
  if (enabled_) {
    // Python: `if growth_factor <= 1.0:` / `if backoff_factor >= 1.0:` -- written as those comparisons so that a
    // NaN factor is accepted exactly as Python accepts it.
    if (growth_factor_ <= 1.0) raise(PyType::AssertionError, "The growth factor must be > 1.0.");
    if (backoff_factor_ >= 1.0) raise(PyType::AssertionError, "The backoff factor must be < 1.0.");
  }
}

// _lazy_init_scale_growth_tracker
void GradScaler::lazy_init_scale_growth_tracker(const c10::Device& device) {
  TORCH_CHECK(!growth_tracker_.defined(), "_growth_tracker initialized before _scale");
  scale_ = at::full({}, init_scale_, at::TensorOptions().dtype(at::kFloat).device(device));
  growth_tracker_ = at::full({}, init_growth_tracker_, at::TensorOptions().dtype(at::kInt).device(device));
}

// _check_scale_growth_tracker
void GradScaler::check_scale_growth_tracker(const char* funcname) const {
  const std::string fix =
      "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration.";
  if (!scale_.defined())
    raise(PyType::AssertionError, std::string("Attempted ") + funcname + " but _scale is None.  " + fix);
  if (!growth_tracker_.defined())
    raise(PyType::AssertionError, std::string("Attempted ") + funcname + " but _growth_tracker is None.  " + fix);
}

// ---------------------------------------------------------------------------------------------------------------
// scale
at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!enabled_) return outputs;
  if (!scale_.defined()) lazy_init_scale_growth_tracker(outputs.device());
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<at::Tensor> GradScaler::scale(const std::vector<at::Tensor>& outputs) {
  if (!enabled_) return outputs;
  // Python's _MultiDeviceReplicator: one copy of the scale per device.
  std::map<std::string, at::Tensor> per_device;
  std::vector<at::Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const auto& out : outputs) {
    if (!scale_.defined()) lazy_init_scale_growth_tracker(out.device());
    auto& s = per_device[device_key(out.device())];
    if (!s.defined()) s = scale_.to(out.device(), /*non_blocking=*/true);
    scaled.push_back(out * s);
  }
  return scaled;
}

// ---------------------------------------------------------------------------------------------------------------
// _unscale_grads_
std::map<std::string, at::Tensor> GradScaler::unscale_grads(ScalableOptimizer& optimizer, const at::Tensor& inv_scale,
                                                            const at::Tensor& found_inf, bool allow_fp16) {
  std::map<std::string, at::Tensor> per_device_inv_scale, per_device_found_inf;
  auto replicate = [](std::map<std::string, at::Tensor>& cache, const at::Tensor& master, const c10::Device& d) {
    auto& t = cache[device_key(d)];
    if (!t.defined()) t = master.device() == d ? master : master.to(d, /*non_blocking=*/true, /*copy=*/true);
    return t;
  };
  // device -> dtype -> grads, in first-seen order (Python dicts keep insertion order)
  std::vector<std::pair<c10::Device, std::vector<std::pair<at::ScalarType, std::vector<at::Tensor>>>>> groups;
  at::NoGradGuard no_grad;
  for (const auto& param : optimizer.scaled_parameters()) {
    const at::Tensor& grad = param.grad();
    if (!grad.defined()) continue;
    if (!allow_fp16 && grad.scalar_type() == at::kHalf)
      raise(PyType::ValueError, "Attempting to unscale FP16 gradients.");
    // Sparse grads: Python coalesces fp16 sparse grads first; ampcheck's optimizers only produce dense grads.
    TORCH_CHECK(!grad.is_sparse(), "ampcheck GradScaler: sparse gradients are not supported");
    auto dev_it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == grad.device(); });
    if (dev_it == groups.end()) {
      groups.push_back({grad.device(), {}});
      dev_it = std::prev(groups.end());
    }
    auto& by_dtype = dev_it->second;
    auto dt_it =
        std::find_if(by_dtype.begin(), by_dtype.end(), [&](const auto& g) { return g.first == grad.scalar_type(); });
    if (dt_it == by_dtype.end()) {
      by_dtype.push_back({grad.scalar_type(), {}});
      dt_it = std::prev(by_dtype.end());
    }
    dt_it->second.push_back(grad);
  }
  for (auto& [device, by_dtype] : groups) {
    at::Tensor dev_found_inf = replicate(per_device_found_inf, found_inf, device);
    at::Tensor dev_inv_scale = replicate(per_device_inv_scale, inv_scale, device);
    for (auto& [dtype, grads] : by_dtype)
      at::_amp_foreach_non_finite_check_and_unscale_(grads, dev_found_inf, dev_inv_scale);
  }
  return per_device_found_inf;
}

// unscale_
void GradScaler::unscale_(ScalableOptimizer& optimizer) {
  if (!enabled_) return;
  check_scale_growth_tracker("unscale_");
  auto& state = per_optimizer_states_[&optimizer];
  if (state.stage == Stage::UNSCALED)
    raise(PyType::RuntimeError, "unscale_() has already been called on this optimizer since the last update().");
  if (state.stage == Stage::STEPPED) raise(PyType::RuntimeError, "unscale_() is being called after step().");
  // FP32 division can be imprecise for certain compile options, so the reciprocal is taken in FP64.
  at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  at::Tensor found_inf = at::full({}, 0.0, scale_.options().dtype(at::kFloat));
  state.found_inf_per_device = unscale_grads(optimizer, inv_scale, found_inf, /*allow_fp16=*/false);
  if (found_inf_reducer_)
    for (auto& kv : state.found_inf_per_device) found_inf_reducer_(kv.second);
  state.stage = Stage::UNSCALED;
}

// _check_inf_per_device: the inf check without unscaling (inv_scale 1), FP16 grads allowed.
void GradScaler::check_inf_per_device(ScalableOptimizer& optimizer) {
  check_scale_growth_tracker("_check_inf_per_device");
  at::Tensor dummy_inv_scale = at::full({}, 1.0, scale_.options().dtype(at::kFloat));
  at::Tensor found_inf = at::full({}, 0.0, scale_.options().dtype(at::kFloat));
  auto& state = per_optimizer_states_[&optimizer];
  state.found_inf_per_device = unscale_grads(optimizer, dummy_inv_scale, found_inf, /*allow_fp16=*/true);
  if (found_inf_reducer_)
    for (auto& kv : state.found_inf_per_device) found_inf_reducer_(kv.second);
}

// ampcheck's extension: the check _check_inf_per_device would make, made by the caller (grad_scaler.h).
void GradScaler::record_inf_check(ScalableOptimizer& optimizer, const at::Tensor& found_inf) {
  if (!enabled_) return;
  check_scale_growth_tracker("record_inf_check");
  if (!optimizer.supports_amp_scaling())
    raise(PyType::RuntimeError, "record_inf_check() is for optimizers that take the scale on the device (fused).");
  auto& state = per_optimizer_states_[&optimizer];
  if (state.stage != Stage::READY || !state.found_inf_per_device.empty())
    raise(PyType::RuntimeError, "record_inf_check() must come once per step, before unscale_() and step().");
  TORCH_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat,
              "record_inf_check: found_inf must be one float32");
  at::Tensor f = found_inf.reshape({});
  state.found_inf_per_device[device_key(f.device())] = f;
  if (found_inf_reducer_)
    for (auto& kv : state.found_inf_per_device) found_inf_reducer_(kv.second);
}

// ---------------------------------------------------------------------------------------------------------------
// step
bool GradScaler::step(ScalableOptimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale_growth_tracker("step");
  auto& state = per_optimizer_states_[&optimizer];
  if (state.stage == Stage::STEPPED)
    raise(PyType::RuntimeError, "step() has already been called since the last update().");

  if (optimizer.supports_amp_scaling()) {
    // Fused optimizers: hand over grad_scale and found_inf, no host sync.
    // (a check recorded by record_inf_check stands for this one)
    if (state.stage == Stage::READY && state.found_inf_per_device.empty()) check_inf_per_device(optimizer);
    at::Tensor found = found_inf(optimizer);
    // Python: found_inf = sum([...]) over the recorded devices, which is 0 when no grad was checked.
    if (!found.defined()) found = at::zeros({}, scale_.options().dtype(at::kFloat));
    c10::optional<at::Tensor> grad_scale;
    if (state.stage != Stage::UNSCALED) grad_scale = scale_;
    optimizer.step_with_amp_scaling(grad_scale, found);
    state.stage = Stage::STEPPED;
    return true;
  }

  if (state.stage == Stage::READY) unscale_(optimizer);
  if (state.found_inf_per_device.empty())
    raise(PyType::AssertionError, "No inf checks were recorded for this optimizer.");
  // _maybe_opt_step. SYNC POINT: the skip decision is taken on the host, as in PyTorch.
  double found_sum = 0.0;
  for (const auto& [dev, t] : state.found_inf_per_device) found_sum += t.item<double>();
  bool stepped = false;
  if (found_sum == 0.0) {
    optimizer.step();
    stepped = true;
  }
  state.stage = Stage::STEPPED;
  return stepped;
}

// ---------------------------------------------------------------------------------------------------------------
// update
void GradScaler::update() {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  std::vector<at::Tensor> found_infs;
  for (const auto& [opt, state] : per_optimizer_states_)
    for (const auto& [dev, t] : state.found_inf_per_device)
      found_infs.push_back(t.to(scale_.device(), /*non_blocking=*/true));
  if (found_infs.empty()) raise(PyType::AssertionError, "No inf checks were recorded prior to update.");
  at::Tensor combined = found_infs[0];
  for (size_t i = 1; i < found_infs.size(); ++i) combined += found_infs[i];
  at::_amp_update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_, growth_interval_);
  per_optimizer_states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  scale_.fill_(new_scale);
  per_optimizer_states_.clear();
}

void GradScaler::update(const at::Tensor& new_scale) {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  const std::string reason =
      "new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch.FloatTensor with "
      "requires_grad=False.";
  if (new_scale.device().type() != device_) raise(PyType::AssertionError, reason);
  if (new_scale.numel() != 1) raise(PyType::AssertionError, reason);
  if (new_scale.requires_grad()) raise(PyType::AssertionError, reason);
  // Python: `self._scale.copy_(new_scale)` -- no reshape, so a shape-[1] tensor fails in copy_ exactly as in Python
  // ("output with shape [] doesn't match the broadcast shape [1]").
  scale_.copy_(new_scale);
  per_optimizer_states_.clear();
}

// ---------------------------------------------------------------------------------------------------------------
// accessors
double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

GradScaler::Stage GradScaler::stage(const ScalableOptimizer& optimizer) const {
  auto it = per_optimizer_states_.find(&optimizer);
  return it == per_optimizer_states_.end() ? Stage::READY : it->second.stage;
}

at::Tensor GradScaler::found_inf(const ScalableOptimizer& optimizer) const {
  auto it = per_optimizer_states_.find(&optimizer);
  if (it == per_optimizer_states_.end() || it->second.found_inf_per_device.empty()) return {};
  at::Tensor sum;
  for (const auto& [dev, t] : it->second.found_inf_per_device) {
    at::Tensor on_scale_device = t.to(scale_.device(), /*non_blocking=*/true);
    sum = sum.defined() ? sum + on_scale_device : on_scale_device;
  }
  return sum;
}

GradScalerStateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", get_scale()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", static_cast<double>(growth_interval_)},
          {"_growth_tracker", static_cast<double>(get_growth_tracker())}};
}

void GradScaler::load_state_dict(const GradScalerStateDict& state) {
  if (!enabled_) return;
  if (state.empty())
    raise(PyType::RuntimeError,
          "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler.");
  auto get = [&](const char* key) {
    auto it = state.find(key);
    if (it == state.end()) raise(PyType::RuntimeError, std::string("GradScaler state dict has no key '") + key + "'");
    return it->second;
  };
  init_scale_ = get("scale");
  if (scale_.defined()) scale_.fill_(init_scale_);
  growth_factor_ = get("growth_factor");
  backoff_factor_ = get("backoff_factor");
  growth_interval_ = static_cast<int64_t>(get("growth_interval"));
  init_growth_tracker_ = static_cast<int64_t>(get("_growth_tracker"));
  if (growth_tracker_.defined()) growth_tracker_.fill_(init_growth_tracker_);
}

}  // namespace ampcheck::amp
