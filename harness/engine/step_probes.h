// StepProbes — what each training step measures, and where each measurement comes from. The engine plan
// (engine_plan.h) decides the source; the trainer only calls the two probe points of its step:
//   before_step (after backward, the gradient sync and planted events; before unscale, clip and step):
//     the true gradient norm (the grads as backward left them, divided by the loss scale they carry) from a pass of
//     its own, or from the fused grad check's pass, which also yields the non-finite flag the GradScaler may take as
//     its inf check (returned); on probe steps the grad-element fractions (zero, subnormal, non-finite) and a
//     snapshot of the stepped parameters;
//   row (after the step): the gradient norm from AdamW's pass where the plan takes it there, the parameter norm
//     (AdamW's sums or a pass), the update norm on probe steps; then the step's trajectory row.
// Columns a step does not probe are NaN. No host sync.
#pragma once

#include "engine/engine_plan.h"
#include "engine/optimizer.h"

#include <ATen/ATen.h>

#include <vector>

namespace ampcheck::engine {

class StepProbes {
 public:
  StepProbes(const EnginePlan& plan, const at::Device& device);

  // grads: the model's grads as backward left them; scale: the loss scale they carry (1 without a scaler), a tensor
  // the step does not change afterwards (a copy of the GradScaler's, which update() changes in place);
  // stepped: the parameters the optimizer steps (used on probe steps only). Returns the fused grad check's non-finite
  // flag where its pass ran (undefined otherwise).
  at::Tensor before_step(const std::vector<at::Tensor>& grads, const at::Tensor& scale, bool full_probe,
                         const std::vector<at::Tensor>& stepped);
  // The step's row ((kNumDeviceColumns,) fp64 on the device) once it stepped: first = the (single) optimizer whose
  // pass the plan may read (null: this rank steps no parameter); stepped: the parameters it stepped.
  at::Tensor row(const at::Tensor& loss, const at::Tensor& skipped, const Optimizer* first,
                 const std::vector<at::Tensor>& stepped);
  // after a checkpoint load: the next probe step starts a new snapshot
  void forget_snapshot() { prev_params_.clear(); }

 private:
  std::vector<at::Tensor> grad_stats(const std::vector<at::Tensor>& grads) const;  // zero, subnormal, nonfinite

  bool fused_grad_check_, param_norm_from_optimizer_, grad_norm_from_optimizer_;
  at::Device device_;
  // this step's measurements between the two probe points
  bool full_probe_ = false;
  at::Tensor scale_, grad_norm_;
  std::vector<at::Tensor> stats_;
  std::vector<at::Tensor> prev_params_;  // the stepped parameters before the last probe step (update norm)
};

// The 2-norm over tensors, accumulated in fp32 whatever their dtype (a zero on device for none).
at::Tensor total_norm(const std::vector<at::Tensor>& ts, const at::Device& device);

}  // namespace ampcheck::engine
