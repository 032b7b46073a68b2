// Optimizers the engine trains with: AdamW (ATen's fused kernel, which PyTorch's AdamW(fused=True) calls, on CPU
// and CUDA) and SGD with momentum. Both implement amp::ScalableOptimizer so GradScaler drives them exactly as
// PyTorch's GradScaler drives torch.optim. State tensors have the parameter's dtype (as torch.optim does), so a
// `.half()` model keeps fp16 Adam moments — one of the pitfalls ampcheck exposes.
#pragma once

#include <ampcheck/amp/scalable_optimizer.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::engine {

struct OptimizerConfig {
  std::string kind = "adamw";  // adamw | sgd
  double lr = 1e-3;            // peak learning rate (the schedule scales it)
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled (AdamW) / L2 (SGD); only on params marked `decay`
  double momentum = 0.9;      // sgd
  // fused = true: GradScaler hands grad_scale/found_inf to the kernel (no host sync, PyTorch's AdamW(fused=True)).
  // fused = false: GradScaler unscales, syncs and skips on the host (PyTorch's default AdamW), which is also the path
  // that refuses fp16 grads with "Attempting to unscale FP16 gradients.". SGD is never fused.
  bool fused = false;
  // engine option train.fused_param_norm: AdamW steps fp32 parameters of one device by kernels::adamw_square_sums_
  // (on CUDA the project's kernel, bit for bit ATen's _fused_adamw_), which leaves the updated parameters' sums of
  // squares for param_square_sum(). Otherwise, and for SGD, ignored.
  bool sum_param_squares = false;
  // with sum_param_squares, on steps without a GradScaler's scale: the grads' sums of squares from the same pass, for
  // grad_square_sum() (train.fused_param_norm's gradient norm where nothing scales or clips the grads)
  bool sum_grad_squares = false;
};

// A named tensor of optimizer state, for checkpoints.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Optimizer : public amp::ScalableOptimizer {
 public:
  // params[i] is updated; decay[i] says whether weight decay applies to it.
  Optimizer(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg);
  std::vector<at::Tensor> scaled_parameters() const override { return params_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  // The learning rate of the next step (written into the lr tensor too when there is one: a captured step reads it).
  void set_lr(double lr);
  // From now on the learning rate also lives in a 0-dim fp32 tensor on `device`, which the step reads (AdamW's
  // tensor-lr kernel): what a CUDA graph replay needs, as the host number would be frozen into the graph.
  void keep_lr_on_device(const at::Device& device);
  double lr() const { return lr_; }
  void zero_grad();  // grads set to undefined (set_to_none=True, PyTorch's default)
  // Σ p² over every parameter after the last step (0-dim fp32 on their device, in parameter order: bit for bit
  // kernels::square_sum_nonfinite(params()).first on CUDA) where that step computed it (sum_param_squares), else
  // undefined.
  virtual at::Tensor param_square_sum() const { return {}; }
  // Σ g² over every parameter's gradient as the last step read it (0-dim fp32; bit for bit
  // kernels::square_sum_nonfinite(grads).first on CUDA where every parameter had one) where that step computed it
  // (sum_grad_squares, no grad_scale), else undefined.
  virtual at::Tensor grad_square_sum() const { return {}; }
  // whether this optimizer's steps compute param_square_sum() (and, with sum_grad_squares and no grad_scale,
  // grad_square_sum()): sum_param_squares set and the parameters ones it can sum (AdamW: fp32, contiguous, one device)
  virtual bool sums_squares() const { return false; }
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& state) = 0;
  // Replaces the parameter tensors (same shapes/dtypes), e.g. after a checkpoint load into new leaves.
  void rebind(std::vector<at::Tensor> params);

 protected:
  std::vector<at::Tensor> params_;
  std::vector<bool> decay_;
  OptimizerConfig cfg_;
  double lr_;
  at::Tensor lr_tensor_;  // undefined unless keep_lr_on_device
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg);
  void step() override;
  bool supports_amp_scaling() const override { return cfg_.fused; }
  void step_with_amp_scaling(const c10::optional<at::Tensor>& grad_scale, const at::Tensor& found_inf) override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;
  at::Tensor param_square_sum() const override { return param_sq_; }
  at::Tensor grad_square_sum() const override { return grad_sq_; }
  bool sums_squares() const override;

 private:
  void fused_step(const c10::optional<at::Tensor>& grad_scale, const c10::optional<at::Tensor>& found_inf);
  void lazy_init_state();
  std::vector<int64_t> first_part_;  // sum_param_squares: param i's first partial in part_sum_
  at::Tensor part_sum_, param_sq_, grad_part_sum_, grad_sq_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, steps_;  // per param; steps_: () float32 on the param's device
  // Parameter groups for the fused kernel: same device, dtype and weight decay.
  std::vector<std::vector<size_t>> groups_;
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg);
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 private:
  std::vector<at::Tensor> momentum_buffer_;
};

std::unique_ptr<Optimizer> make_optimizer(std::vector<at::Tensor> params, std::vector<bool> decay,
                                          const OptimizerConfig& cfg);

// ---------------------------------------------------------------------------------------------------------------
// Learning-rate schedule: linear warmup to lr, then cosine decay to min_lr at total_steps (or constant).
struct ScheduleConfig {
  std::string kind = "cosine";  // cosine | constant
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;  // min_lr = min_lr_ratio * lr
};
double scheduled_lr(const ScheduleConfig& s, double peak_lr, int64_t step, int64_t total_steps);

// torch.nn.utils.clip_grad_norm_(foreach=True) on the given grads: total 2-norm over all, scale by
// min(1, max_norm / (total + 1e-6)); stays on the device (no sync). Returns the total norm (0-dim, fp32).
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace ampcheck::engine
