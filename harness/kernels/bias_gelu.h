// A Linear with bias (+ GELU) whose bias gradient is one column-sum pass (engine option
// model.fused_bias_gelu). Kernel: column_sums.cu.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <utility>

namespace ampcheck::kernels {

// A Linear with bias, optionally followed by GELU (tanh) (engine option `model.fused_bias_gelu`). Forward as the
// stock ops compute it under autocast: x, w, b cast to the autocast dtype (x's dtype without autocast), one addmm with
// the bias, ATen's gelu. Backward: the bias gradient in one column-sum pass over the output gradient — fused with the
// GELU backward when `gelu` is set (ATen's formula, element for element) — summed in fp32 in a fixed order and rounded
// through the compute dtype as the stock sum returns it; dx and dw by the stock backward's GEMMs. x (…, K), w (N, K),
// b (N); gradients in the dtypes of x, w and b.
at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu,
                            Impl impl = Impl::Auto);

// The column sums of g (R, C) as the bias gradient: fp32, rounded through g's dtype (g.sum(0) widened to fp32). With
// `pre` defined, g is first replaced by the GELU (tanh) backward at pre; returns {sums, that gradient (or g)}.
std::pair<at::Tensor, at::Tensor> bias_grad(const at::Tensor& g, const at::Tensor& pre, Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
