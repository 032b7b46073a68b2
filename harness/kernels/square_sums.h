// Sums of squares with the non-finite check in one pass (train.fused_grad_check), and their per-block
// partials (train.fused_param_norm). Kernel: square_sums.cu.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ampcheck::kernels {

// Σ x² over every element of `ts` and whether any element is inf or NaN, in one pass (the trainer's gradient norm and
// the GradScaler's inf check from one read of the grads: engine option train.fused_grad_check). Returns {sum of
// squares, found}: 0-dim fp32 on the tensors' device; found is 1 where some element is inf or NaN, else 0 (what
// _amp_foreach_non_finite_check_and_unscale_ leaves in a zeroed found_inf). Each x squared in fp32; for CUDA tensors
// of one device (fp32 / fp16 / bf16, contiguous; any count) the per-block fp32 sums are added in a fixed order in fp64
// and rounded to fp32 — deterministic, inf beyond fp32's range as fp32 sums would be —, two launches per dtype and 128
// tensors; elsewhere the ATen ops (Σ of each tensor's fp32 sum of squares). Empty `ts`: {0, 0} on the CPU.
std::pair<at::Tensor, at::Tensor> square_sum_nonfinite(const std::vector<at::Tensor>& ts, Impl impl = Impl::Auto);

// The partial sums of squares square_sum_nonfinite forms for one tensor of `numel` elements (one per block of 8192
// elements), so a caller can lay out every tensor's partials in one buffer.
int64_t square_sum_parts(int64_t numel);
// Σ of the partials in `part_sum` (fp32, 1-dim) added in a fixed order — CUDA: square_sum_nonfinite's own last step
// (fp64, rounded to fp32); elsewhere in fp64 by ATen. 0-dim fp32 on part_sum's device.
at::Tensor square_sum_total(const at::Tensor& part_sum, Impl impl = Impl::Auto);
// The partials of square_sum_nonfinite for each tensor of `ts` (fp32, contiguous, one device) written to
// part_sum[first_part[t] ..+ square_sum_parts(ts[t].numel())).
void square_sum_parts_(const std::vector<at::Tensor>& ts, at::Tensor& part_sum, const std::vector<int64_t>& first_part,
                       Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
