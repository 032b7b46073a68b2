// AdamW's fused step with the updated parameters' sums of squares (train.fused_param_norm). Kernel: adamw.cu;
// the partials are square_sums.h's.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ampcheck::kernels {

// AdamW's fused step with the updated parameters' sums of squares from the same pass (engine option
// train.fused_param_norm: the trainer's per-step parameter norm without a pass of its own). Updates params,
// exp_avgs, exp_avg_sqs as ATen's _fused_adamw_ (what PyTorch's AdamW(fused=True) calls; decoupled weight decay, no
// amsgrad, no maximize) does: grads divided by grad_scale and stored unscaled where it is given, nothing updated where
// found_inf holds 1; steps (one 0-dim fp32 per tensor, the count this step uses) are read, not changed — the caller
// increments them as the optimizer does. lr: a 0-dim fp32 tensor on the device, read there, or undefined: lr_value.
// Then tensor t's square_sum_parts(numel) partial sums of squares of the updated parameter go to
// part_sum[first_part[t] ..): the partials square_sum_nonfinite forms for it, so square_sum_total over every
// parameter's partials in parameter order is that pass's sum. CUDA fp32 contiguous tensors of one device: one pass
// (kernels/adamw.cu; the update bit for bit _fused_adamw_'s, the partials bit for bit square_sum_nonfinite's);
// elsewhere the reference: at::_fused_adamw_, then square_sum_parts_. grad_part_sum (optional, like part_sum; only
// without grad_scale): the grads' partials too, in the same layout (the gradient norm's pass, from the same read).
void adamw_square_sums_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                        const std::vector<at::Tensor>& steps, const at::Tensor& lr, double lr_value, double beta1,
                        double beta2, double weight_decay, double eps, const c10::optional<at::Tensor>& grad_scale,
                        const c10::optional<at::Tensor>& found_inf, at::Tensor& part_sum,
                        const std::vector<int64_t>& first_part, Impl impl = Impl::Auto,
                        at::Tensor* grad_part_sum = nullptr);

}  // namespace ampcheck::kernels
