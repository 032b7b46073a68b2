// The residual add fused with LayerNorm (engine option model.fused_layernorm), and the bias-gradient tap it
// shares with the stock path. Kernel: layer_norm.cu.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <utility>

namespace ampcheck::kernels {

// y unchanged (a view); backward: y's gradient passes through and `bias` (y.size(-1)) gets the stock bias gradient of
// the Linear whose output y is — y's gradient summed over all but its last dimension in y's dtype (what addmm's
// backward returns), in bias's dtype. For a Linear run with its bias detached whose gradient is taken downstream: the
// reference of add_layer_norm's y_bias.
at::Tensor with_bias_gradient(const at::Tensor& y, const at::Tensor& bias);

// The residual add fused with the LayerNorm that follows it (engine option `model.fused_layernorm`):
//   s = x + y   (fp32, as x + y promotes under autocast; y: the branch output in its own dtype, or undefined: s = x)
//   h = LayerNorm(s) · γ + β, computed in fp32 and rounded once to out_dtype (what autocast's fp32 layer_norm followed
//       by the next Linear's cast to the autocast dtype gives)
// Returns {s, h}, both differentiable: s's gradient (the residual path) and h's (the branch) meet in one backward
// pass that writes ds in fp32 and dy in y's dtype, with dγ, dβ in fp32 (summed in a fixed order: deterministic). x, γ,
// β must be fp32 with x (…, C); the CUDA kernels take C a multiple of 128 up to 1024 or of 32 up to 256, and y in fp32
// or out_dtype (else, and on the CPU, the reference: the same stock ATen ops).
// y_bias (C): where defined, the bias of the Linear whose output y is — y holds it already, and the caller handed that
// Linear the bias detached —: its gradient comes from this backward, the column sums of y's gradient as written in
// y's dtype (fp32 accumulation in a fixed order, rounded through y's dtype: what the stock sum in addmm's backward
// returns; the reference runs that sum), in y_bias's dtype. y's only consumer must be this add.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                                                 const at::Tensor& beta, double eps, at::ScalarType out_dtype,
                                                 Impl impl = Impl::Auto, const at::Tensor& y_bias = {});

}  // namespace ampcheck::kernels
