// The tied output projection fused with cross-entropy, in chunks of rows (engine option `model.head_loss: chunked`):
// the (B·T × V) logits are never held whole. Forward: per chunk, logits = x_c W^T (under the caller's autocast, as
// the stock at::linear), log-sum-exp in fp32, loss; only the per-row log-sum-exp (N floats) is kept. Backward:
// per chunk, the logits are recomputed, grad_logits = (softmax − one-hot) · grad_loss / N in fp32 — the same values
// the stock cross-entropy backward produces, the loss scale included — cast to the dtype the forward computed the
// logits in, then dx_c = grad_logits W and dW += grad_logitsᵀ x_c (fp32 accumulation). It trades one extra
// head matmul (recomputing the logits) for the logits' memory. Tested against the stock path (head_loss_test).
#pragma once

#include <ATen/ATen.h>

namespace ampcheck::models {

// Mean cross-entropy of (x W^T) against targets. x: (N, C), w: (V, C), targets: (N,) int64. chunk_rows: rows per
// chunk (0 = a size that keeps a chunk's fp32 logits near 256 MiB).
at::Tensor chunked_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                      int64_t chunk_rows = 0);

}  // namespace ampcheck::models
