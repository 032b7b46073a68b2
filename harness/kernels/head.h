// The fused head's ops (models/head_loss.h): row-wise cross-entropy with its gradient in place, the tied
// embedding's backward, a scale that skips x · 1. Kernels: cross_entropy_rows.cu, embedding_rows.cu.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

#include <cstdint>

namespace ampcheck::kernels {

// Softmax cross-entropy of each row of `logits` (R × V, fp32 / fp16 / bf16, rows contiguous) against `targets` (R,
// int64), computed in fp32 from the logits' values: row_loss (R, fp32) = log-sum-exp − logit[target]; `logits` is
// overwritten in place by (softmax − one-hot(target)) · factor, rounded once to its dtype. factor: a 0-dim fp32
// tensor on the logits' device (read there: no host sync). Rows whose target is ignore_index get loss 0 and a zero
// gradient; a target outside [0, V) gives that row NaN (no device assert).
void cross_entropy_rows_(at::Tensor& logits, const at::Tensor& targets, at::Tensor& row_loss, const at::Tensor& factor,
                         int64_t ignore_index = -100, Impl impl = Impl::Auto);

// The tied token embedding's backward added into the gradient the tied head already produced (the fused head's tied
// path, models/head_loss.h): grad (V, C) += Σ rows[n] over the positions n whose token is v, for each token v — each
// token's rows summed in fp32 in a fixed order, then added once (deterministic). rows (N, C), indices (N) int64. For
// CUDA fp32 with C % 4 == 0: a stable sort of the indices and one kernel; elsewhere grad += the stock
// at::embedding_dense_backward (bit for bit what autograd's stock path gives: the head's gradient plus the
// embedding's).
void embedding_backward_add_(at::Tensor& grad, const at::Tensor& rows, const at::Tensor& indices,
                             Impl impl = Impl::Auto);

// x *= r in place (r a 0-dim fp32 tensor on x's device, rounded to x's dtype as ATen's type promotion does; the
// product in fp32, rounded once to x's dtype: what x.mul_(r) gives), read on the device: where r holds exactly 1 the
// CUDA kernel returns without touching x (x · 1 == x), so the fused head's backward pays no pass on its normal path.
// CUDA fp32 / fp16 / bf16 contiguous x; elsewhere x.mul_(r).
void scale_unless_one_(at::Tensor& x, const at::Tensor& r, Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
