// Fused kernels: engine options that replace a sequence of stock ATen ops by one pass written in the project as
// CUDA C++ (harness/kernels/*.cu). Each has an ATen reference implementation with the same contract, used on the
// CPU, where the kernels were not built (no CUDA LibTorch or no nvcc), or when asked for (Impl::Reference), so tests
// and benchmarks compare the two. A fused kernel is a precision decision of its own: its contract says what it
// computes in which dtype.
#pragma once

#include <ATen/ATen.h>

namespace ampcheck::kernels {

// Whether this build carries the CUDA kernels (CMake AMPCHECK_CUDA_KERNELS, on where LibTorch has CUDA and nvcc is
// found).
bool cuda_kernels_built();

enum class Impl { Auto, Reference };  // Auto: the CUDA kernel for CUDA tensors where built, else the reference

// Softmax cross-entropy of each row of `logits` (R × V, fp32 / fp16 / bf16, rows contiguous) against `targets` (R,
// int64), computed in fp32 from the logits' values: row_loss (R, fp32) = log-sum-exp − logit[target]; `logits` is
// overwritten in place by (softmax − one-hot(target)) · factor, rounded once to its dtype. factor: a 0-dim fp32
// tensor on the logits' device (read there: no host sync). Rows whose target is ignore_index get loss 0 and a zero
// gradient; a target outside [0, V) gives that row NaN (no device assert).
void cross_entropy_rows_(at::Tensor& logits, const at::Tensor& targets, at::Tensor& row_loss, const at::Tensor& factor,
                         int64_t ignore_index = -100, Impl impl = Impl::Auto);

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
// pass that writes ds in fp32 and dy in y's dtype, with dγ, dβ in fp32 (summed in a fixed order: deterministic). x, γ, β
// must be fp32 with x (…, C); the CUDA kernels take C a multiple of 128 up to 1024 or of 32 up to 256, and y in fp32
// or out_dtype (else, and on the CPU, the reference: the same stock ATen ops).
// y_bias (C): where defined, the bias of the Linear whose output y is — y holds it already, and the caller handed that
// Linear the bias detached —: its gradient comes from this backward, the column sums of y's gradient as written in
// y's dtype (fp32 accumulation in a fixed order, rounded through y's dtype: what the stock sum in addmm's backward
// returns; the reference runs that sum), in y_bias's dtype. y's only consumer must be this add.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                                                 const at::Tensor& beta, double eps, at::ScalarType out_dtype,
                                                 Impl impl = Impl::Auto, const at::Tensor& y_bias = {});

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

// Casts in one pass (model.gemm_epilogues takes the step's weight casts through it): every tensor of `srcs` rounded
// to `dtype` (fp16 or bf16; round to nearest even, bit for bit what src.to(dtype) returns), not differentiable. For
// CUDA fp32 contiguous tensors one launch casts them all into one buffer (each result a view of it, its start 16-byte
// aligned); elsewhere each is src.to(dtype).
std::vector<at::Tensor> cast_many(const std::vector<at::Tensor>& srcs, at::ScalarType dtype, Impl impl = Impl::Auto);

// parts[0] + parts[1] + … in fp32, added in that order (each part widened exactly first; what starting from zeros and
// add_-ing each part into an fp32 tensor gives): parts of one shape and one dtype (fp16, bf16 or fp32), at most 8. One
// launch for CUDA fp16 / bf16 parts; elsewhere the ATen ops.
at::Tensor widen_sum(const std::vector<at::Tensor>& parts, Impl impl = Impl::Auto);

// The tied token embedding's backward added into the gradient the tied head already produced (the fused head's tied
// path, models/head_loss.h): grad (V, C) += Σ rows[n] over the positions n whose token is v, for each token v — each
// token's rows summed in fp32 in a fixed order, then added once (deterministic). rows (N, C), indices (N) int64. For
// CUDA fp32 with C % 4 == 0: a stable sort of the indices and one kernel; elsewhere grad += the stock
// at::embedding_dense_backward (bit for bit what autograd's stock path gives: the head's gradient plus the
// embedding's).
void embedding_backward_add_(at::Tensor& grad, const at::Tensor& rows, const at::Tensor& indices, Impl impl = Impl::Auto);

// x *= r in place (r a 0-dim fp32 tensor on x's device, rounded to x's dtype as ATen's type promotion does; the
// product in fp32, rounded once to x's dtype: what x.mul_(r) gives), read on the device: where r holds exactly 1 the CUDA kernel returns without touching x (x · 1 == x), so
// the fused head's backward pays no pass on its normal path. CUDA fp32 / fp16 / bf16 contiguous x; elsewhere x.mul_(r).
void scale_unless_one_(at::Tensor& x, const at::Tensor& r, Impl impl = Impl::Auto);

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
