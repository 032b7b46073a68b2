// The tied output projection fused with cross-entropy, in chunks of rows (engine option `model.head_loss: chunked`):
// the (B·T × V) logits are never held whole. Forward: per chunk, logits = x_c W^T (under the caller's autocast, as
// the stock at::linear), log-sum-exp in fp32, loss; only the per-row log-sum-exp (N floats) is kept. Backward:
// per chunk, the logits are recomputed, grad_logits = (softmax − one-hot) · grad_loss / N in fp32 — the same values
// the stock cross-entropy backward produces, the loss scale included — cast to the dtype the forward computed the
// logits in, then dx_c = grad_logits W and dW += grad_logitsᵀ x_c (fp32 accumulation). It trades one extra
// head matmul (recomputing the logits) for the logits' memory. Tested against the stock path (head_loss_test).
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace ampcheck::models {

// Mean cross-entropy of (x W^T) against targets. x: (N, C), w: (V, C), targets: (N,) int64. chunk_rows: rows per
// chunk (0 = a size that keeps a chunk's fp32 logits near 256 MiB).
at::Tensor chunked_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                      int64_t chunk_rows = 0);

// The same, fused further (engine option `model.head_loss: fused`): the gradients are computed in the forward, so no
// logits are recomputed. Per chunk: logits = x_c W^T in the dtype at::linear would use (autocast's), then one pass of
// kernels::cross_entropy_rows_ (CUDA C++ where built) turns them in place into the loss rows and grad_logits =
// (softmax − one-hot) · hint / N — the values the stock cross-entropy backward produces when backward is called
// with `hint` (the loss scale, or 1), rounded once to the logits' dtype — then dx_c = grad_logits W (in that dtype)
// and dW += grad_logitsᵀ x_c (each chunk's GEMM in that dtype, summed in fp32). Backward multiplies both by
// grad / hint (1 on the normal path). The only logits held are one chunk's, in their own dtype. Where the grad
// backward receives is not the hint, values agree to rounding but an fp16 underflow of grad_logits happens at the
// hinted scale, not the real one (the trainer's hint includes the loss scale, planted loss-scale events and the
// division by micro-batches, so in its runs the two agree). Targets equal to -100 are ignored (as the stock loss).
// grad_scale_hint: 0-dim tensor (undefined = 1). fp32_wgrad (engine option model.gemm_epilogues): in bf16 on a GPU
// with cuBLASLt linked the chunks' weight gradients are summed inside the GEMM in fp32 (kernels::wgrad_fp32_), none
// rounded to bf16 first; elsewhere it changes nothing. In fp16 (and in bf16 without that) the chunks' rounded weight
// gradients are summed in fp32 in chunk order by one pass at the end (kernels::widen_sum; the same sums as adding
// each into fp32 zeros). w_cast: w already in the logits' dtype (the step's one-pass casts), used instead of
// casting w here — the same values.
// tied: see TiedGradient (null: w's gradient is returned to autograd as any input's).
// compute_dtype: the dtype the logits are computed in (the model passes its engine plan's); unset: at::linear's
// under the caller's autocast, for a call outside a model.
struct TiedGradient;
at::Tensor fused_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                    int64_t chunk_rows = 0, const at::Tensor& grad_scale_hint = {},
                                    bool fp32_wgrad = false, const at::Tensor& w_cast = {},
                                    TiedGradient* tied = nullptr, std::optional<at::ScalarType> compute_dtype = {});

// The fused head's tied path: the head's weight gradient and the token embedding's meet in one tensor instead of
// autograd's sum of two. The fused head's backward (which runs first: the loss is its output) leaves its gradient
// for w here instead of returning it; tied_embedding's backward adds the lookup's rows into that tensor in place
// (kernels::embedding_backward_add_: no (V, C) zero-fill, no separate embedding gradient, no (V, C) add) and returns
// it as w's gradient. The values are the stock path's: the head's gradient plus each token's rows summed in fp32 (in
// another order on CUDA). Both calls take the same TiedGradient, owned by the model, for one forward and backward.
struct TiedGradient {
  at::Tensor grad;  // the head's gradient for w between the two backward passes; undefined otherwise
};
// at::embedding(w, indices), with the backward above.
at::Tensor tied_embedding(const at::Tensor& w, const at::Tensor& indices, TiedGradient* tied);

}  // namespace ampcheck::models
