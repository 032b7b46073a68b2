// GEMM epilogues (engine option `model.gemm_epilogues`): the elementwise work around a Linear done inside cuBLASLt's
// matrix products instead of in passes of its own. Where it applies (CUDA tensors, autocast computing in bf16 or
// fp16, feature widths that are multiples of 8, a build that links cuBLASLt) the products are gemm_lt.cu's; elsewhere,
// and with Impl::Reference, the stock ATen ops run (the same ones the engine runs without the option).
//
// The contract, where it differs from the stock ops (a precision decision of its own, validated like the others):
//  - the MLP's GELU (tanh) is applied by the c_fc GEMM to its fp32 result plus bias before rounding (stock: to the
//    value rounded to the compute dtype), and its backward by c_proj's input-gradient GEMM to the fp32 product
//    before rounding (stock: to the rounded product); the pre-activation kept for it is the rounded one, as stock;
//  - each block Linear's weight and bias gradients come out of one GEMM: the bias gradient is the sum over rows the
//    GEMM's epilogue forms from the same output gradient (stock: a separate sum); in bf16 both leave that GEMM in
//    fp32 — bf16 has fp32's range, so only the rounding the stock path adds is skipped; in fp16 they are rounded to
//    fp16 as stock, so an overflow the GradScaler must see still shows as inf;
//  - the fused head (model.head_loss: fused) in bf16 sums its chunks' weight gradients inside the GEMM in fp32 (stock
//    fused head: each chunk's rounded to bf16, then summed in fp32).
#pragma once

#include "kernels/fused.h"

#include <ATen/ATen.h>

namespace ampcheck::kernels {

// Whether this build links cuBLASLt (CMake: LibTorch's CUDA::cublasLt target with the CUDA kernels).
bool gemm_epilogues_built();

// Whether the cuBLASLt path takes a Linear of weight w (N, K) on input x: see above.
bool gemm_epilogues_apply(const at::Tensor& x, const at::Tensor& w);

// A Linear with bias, x (…, K) · wᵀ + b, under autocast as at::linear; its backward forms dw and db in one GEMM.
at::Tensor linear_epilogues(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Impl impl = Impl::Auto);

// The GPT MLP, proj(GELU_tanh(fc(x))): x (…, K), w_fc (H, K), b_fc (H), w_proj (N, H), b_proj (N).
at::Tensor mlp_gelu_epilogues(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                              const at::Tensor& w_proj, const at::Tensor& b_proj, Impl impl = Impl::Auto);

// dw (V, C) fp32, contiguous: dw = gᵀ x, or dw += gᵀ x with accumulate; g (n, V), x (n, C) in bf16 or fp16, the
// product accumulated in fp32 and added in fp32 (no rounding to g's dtype). The reference: dw (+)= (gᵀ x) in fp32.
void wgrad_fp32_(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x, bool accumulate, Impl impl = Impl::Auto);

}  // namespace ampcheck::kernels
