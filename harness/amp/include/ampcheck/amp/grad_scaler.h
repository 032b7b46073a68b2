// GradScaler — a faithful C++ port of PyTorch 2.11's torch.amp.GradScaler (torch/amp/grad_scaler.py).
//
// Same defaults (init_scale 2^16, growth 2.0, backoff 0.5, growth interval 2000), same lazy creation of the scale
// and growth tracker on the device of the first scaled tensor, same per-optimizer stage machine
// (READY -> UNSCALED -> STEPPED, reset by update()), same error texts, same skip-on-inf/nan rule, same update rule
// (through ATen's _amp_update_scale_), same state_dict keys. Works on CPU and CUDA.
//
//   GradScaler scaler(at::kCUDA);
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);              // optional, e.g. before clipping
//   scaler.step(opt);                  // skipped if any grad is inf/nan
//   scaler.update();
#pragma once

#include <ampcheck/amp/scalable_optimizer.h>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace ampcheck::amp {

// Python raises ValueError, RuntimeError or AssertionError; what() is the exact Python message text.
class GradScalerError : public std::runtime_error {
 public:
  enum class PythonType { ValueError, RuntimeError, AssertionError };
  GradScalerError(PythonType type, const std::string& message) : std::runtime_error(message), type_(type) {}
  PythonType python_type() const { return type_; }

 private:
  PythonType type_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16
  double growth_factor = 2.0;      // must be > 1
  double backoff_factor = 0.5;     // must be < 1
  int64_t growth_interval = 2000;  // clean steps between growths
  bool enabled = true;
};

// Keys and values as Python's state_dict(): scale, growth_factor, backoff_factor (floats), growth_interval,
// _growth_tracker (ints, held exactly in a double). Empty when the scaler is disabled.
using GradScalerStateDict = std::map<std::string, double>;

class GradScaler {
 public:
  enum class Stage { READY, UNSCALED, STEPPED };

  // device: the device type the scaler serves (Python's `device="cuda"` default). A CUDA scaler built where no CUDA
  // device is available warns and disables itself, as PyTorch does.
  explicit GradScaler(c10::DeviceType device = c10::DeviceType::CUDA, GradScalerOptions options = {});

  // outputs * scale (a no-op when disabled). Lazily creates the scale and growth tracker on outputs' device.
  at::Tensor scale(const at::Tensor& outputs);
  std::vector<at::Tensor> scale(const std::vector<at::Tensor>& outputs);

  // Divides optimizer's grads by the scale in place and records whether any was inf/nan.
  void unscale_(ScalableOptimizer& optimizer);

  // ampcheck's extension (Python has no such call): the fused path's inf check done by the caller in a pass of its own
  // that read every grad of `optimizer` as step() would see them (ampcheck's trainer takes it from its gradient-norm
  // pass: kernels::square_sum_nonfinite). found_inf: 0-dim float32 on the grads' device, 1 where some grad is inf or
  // NaN, else 0. Recorded as _check_inf_per_device would record it (the reducer applied), so step() runs no check of
  // its own. Only for an optimizer that takes the scale on the device (supports_amp_scaling), in stage READY, once per
  // step; raises RuntimeError otherwise.
  void record_inf_check(ScalableOptimizer& optimizer, const at::Tensor& found_inf);

  // Steps the optimizer unless an inf/nan was found (unscaling first if unscale_ was not called).
  // Returns whether the optimizer's step ran (for fused optimizers: whether it was called; it skips on device).
  bool step(ScalableOptimizer& optimizer);

  // Updates the scale from the inf checks since the last update (or sets it), and resets every optimizer's stage.
  void update();
  void update(double new_scale);
  void update(const at::Tensor& new_scale);

  bool is_enabled() const { return enabled_; }
  double get_scale() const;            // host sync when the scale tensor exists
  int64_t get_growth_tracker() const;  // host sync when the tracker exists
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double v) { growth_factor_ = v; }
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double v) { backoff_factor_ = v; }
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t v) { growth_interval_ = v; }

  // The 0-dim float32 scale tensor; undefined before the first scale() call.
  const at::Tensor& scale_tensor() const { return scale_; }
  // Stage of an optimizer since the last update (READY when unseen).
  Stage stage(const ScalableOptimizer& optimizer) const;
  // Sum of the inf checks recorded for an optimizer since the last update (0-dim float32; undefined if none).
  at::Tensor found_inf(const ScalableOptimizer& optimizer) const;

  // A sharded optimizer's inf check agreed across ranks, as PyTorch's ShardedGradScaler does: called on each
  // per-device found_inf right after it is computed (unscale_, or the fused path's check), e.g. an all-reduce (MAX/SUM)
  // over the ranks. None by default (GradScaler's own behaviour).
  void set_found_inf_reducer(std::function<void(at::Tensor&)> reducer) { found_inf_reducer_ = std::move(reducer); }

  GradScalerStateDict state_dict() const;
  void load_state_dict(const GradScalerStateDict& state);

 private:
  struct PerOptimizerState {
    Stage stage = Stage::READY;
    std::map<std::string, at::Tensor> found_inf_per_device;  // device string -> 0-dim float32
  };

  void lazy_init_scale_growth_tracker(const c10::Device& device);
  void check_scale_growth_tracker(const char* funcname) const;
  std::map<std::string, at::Tensor> unscale_grads(ScalableOptimizer& optimizer, const at::Tensor& inv_scale,
                                                  const at::Tensor& found_inf, bool allow_fp16);
  void check_inf_per_device(ScalableOptimizer& optimizer);

  std::function<void(at::Tensor&)> found_inf_reducer_;
  c10::DeviceType device_;
  bool enabled_;
  double init_scale_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // () float32, lazily created
  at::Tensor growth_tracker_;  // () int32, lazily created
  std::unordered_map<const ScalableOptimizer*, PerOptimizerState> per_optimizer_states_;
};

}  // namespace ampcheck::amp
