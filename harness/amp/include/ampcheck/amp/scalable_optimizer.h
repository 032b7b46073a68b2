// The one thing GradScaler needs from an optimizer: its parameters (grads are read through .grad()) and a step.
// An optimizer whose step can consume the scaler's grad_scale / found_inf tensors itself (PyTorch's fused AdamW,
// `_step_supports_amp_scaling = True`) says so, and GradScaler then hands them over instead of syncing to the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <stdexcept>
#include <vector>

namespace ampcheck::amp {

class ScalableOptimizer {
 public:
  virtual ~ScalableOptimizer() = default;

  // Every parameter this optimizer updates, in a stable order. Parameters whose .grad() is undefined are skipped.
  virtual std::vector<at::Tensor> scaled_parameters() const = 0;

  // Plain step: grads are already unscaled and known to be finite.
  virtual void step() = 0;

  // True if step_with_amp_scaling() is implemented (fused optimizers).
  virtual bool supports_amp_scaling() const { return false; }

  // Fused step: divide grads by grad_scale (when given, i.e. not yet unscaled) and do nothing when found_inf != 0,
  // all on the device without a host sync. The state step count must not advance on a skipped step.
  virtual void step_with_amp_scaling(const c10::optional<at::Tensor>& grad_scale, const at::Tensor& found_inf) {
    throw std::logic_error("step_with_amp_scaling() called on an optimizer that does not support it");
  }
};

}  // namespace ampcheck::amp
