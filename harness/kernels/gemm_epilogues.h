// GEMM epilogues (engine option `model.gemm_epilogues`): work around the block Linears' backward done inside
// cuBLASLt's matrix products instead of in passes of its own. Where it applies (CUDA tensors, autocast computing in
// bf16 or fp16, feature widths that are multiples of 8, a build that links cuBLASLt) the products are gemm_lt.cu's;
// elsewhere, and with Impl::Reference, the stock ATen ops run (the same ones the engine runs without the option).
//
// The forward is the stock ops'. The backward, where it differs from the stock ops (a precision decision of its own,
// validated like the others):
//  - the MLP's GELU (tanh) derivative is applied by c_proj's input-gradient GEMM to its fp32 product before rounding
//    (DGELU epilogue; stock: to the product rounded to the compute dtype, by a separate pass), with cuBLASLt's own
//    tanh (measured within 6.5e-5 of the exact derivative on the H200);
//  - in bf16 each block Linear's weight gradient leaves its GEMM in fp32 (stock: rounded to bf16, then cast to the
//    fp32 parameter's dtype by a separate pass) — bf16 has fp32's range, so only a rounding is skipped; in fp16 it is
//    rounded to fp16 as stock, so an overflow the GradScaler must see still shows as inf;
//  - bias gradients are kernels::bias_grad's column sums (as model.fused_bias_gelu: fp32 in a fixed order, rounded
//    through the compute dtype as the stock sum);
//  - the fused head (model.head_loss: fused) in bf16 sums its chunks' weight gradients inside the GEMM in fp32 (the
//    fused head without the option: each chunk's rounded to bf16, then summed in fp32 by a separate pass).
//  - (not a precision change) the weights reach the GEMMs through the step's one-pass casts where the caller hands
//    them in (w_cast / b_cast / casts: kernels::cast_many, bit for bit the per-op casts), and fp16 weight gradients
//    are widened to fp32 by one vectorised pass (kernels::widen_sum, exact).
// The GEMMs' algorithms: cuBLASLt's heuristic, or where deterministic algorithms are off the fastest of its first
// eight candidates timed once per problem (gemm_lt.cu).
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>

namespace ampcheck::kernels {

// Whether this build links cuBLASLt (CMake: LibTorch's CUDA::cublasLt target with the CUDA kernels).
bool gemm_epilogues_built();

// Whether the cuBLASLt path takes a Linear of weight w (N, K) on input x: see above.
bool gemm_epilogues_apply(const at::Tensor& x, const at::Tensor& w);

// A Linear with bias, x (…, K) · wᵀ + b, under autocast as at::linear; its backward: dx by at::mm, dw by one cuBLASLt
// GEMM (fp32 in bf16), db by the column sums.
// w_cast / b_cast: w and b already in the compute dtype (the step's one-pass casts, kernels::cast_many), used instead
// of casting here where given in that dtype — the same values.
at::Tensor linear_epilogues(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Impl impl = Impl::Auto,
                            const at::Tensor& w_cast = {}, const at::Tensor& b_cast = {});

// The GPT MLP, proj(GELU_tanh(fc(x))): x (…, K), w_fc (H, K), b_fc (H), w_proj (N, H), b_proj (N). Forward as the
// stock ops; backward: c_proj's input gradient with GELU's derivative in one GEMM, then as linear_epilogues.
at::Tensor mlp_gelu_epilogues(
    const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc, const at::Tensor& w_proj,
    const at::Tensor& b_proj, Impl impl = Impl::Auto,
    const std::vector<at::Tensor>& casts = {});  // {w_fc, b_fc, w_proj, b_proj} precast, or none

// dw (V, C) fp32, contiguous: dw = gᵀ x, or dw += gᵀ x with accumulate; g (n, V), x (n, C) in bf16 or fp16, the
// product accumulated in fp32 and added in fp32 (no rounding to g's dtype). The reference: dw (+)= (gᵀ x) in fp32.
void wgrad_fp32_(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x, bool accumulate, Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
