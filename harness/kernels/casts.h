// Casts and widening sums in one pass (model.gemm_epilogues' weight casts). Kernel: casts.cu.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <vector>

namespace ampcheck::kernels {

// Casts in one pass (model.gemm_epilogues takes the step's weight casts through it): every tensor of `srcs` rounded
// to `dtype` (fp16 or bf16; round to nearest even, bit for bit what src.to(dtype) returns), not differentiable. For
// CUDA fp32 contiguous tensors one launch casts them all into one buffer (each result a view of it, its start 16-byte
// aligned); elsewhere each is src.to(dtype).
std::vector<at::Tensor> cast_many(const std::vector<at::Tensor>& srcs, at::ScalarType dtype, Impl impl = Impl::Auto);

// parts[0] + parts[1] + … in fp32, added in that order (each part widened exactly first; what starting from zeros and
// add_-ing each part into an fp32 tensor gives): parts of one shape and one dtype (fp16, bf16 or fp32), at most 8. One
// launch for CUDA fp16 / bf16 parts; elsewhere the ATen ops.
at::Tensor widen_sum(const std::vector<at::Tensor>& parts, Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
