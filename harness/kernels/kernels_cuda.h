// The CUDA C++ kernels' launchers: plain C++ signatures (raw pointers, a cudaStream_t passed as void*), so neither
// side includes the other's headers. Each returns nullptr or the CUDA error's text. Only fused_cuda.cpp calls them.
#pragma once

#include <cstdint>

namespace ampcheck::kernels::cuda {

enum class DType { Float32, Float16, BFloat16 };

// See cross_entropy_rows.cu. logits: rows × V with row stride ld (elements), modified in place; targets: rows int64;
// row_loss: rows fp32 (written); factor: one fp32 on the device.
const char* cross_entropy_rows(void* logits, DType dtype, int64_t rows, int64_t V, int64_t ld, const int64_t* targets,
                               float* row_loss, const float* factor, int64_t ignore_index, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See layer_norm.cu. Row-major (N, C), contiguous. y may be null (no residual add; s_out is then null too: s = x);
// dy_out may be null (no branch to return a gradient to). C % 32 == 0, C <= 1024.
const char* add_layer_norm_forward(const float* x, const void* y, DType y_dtype, const float* gamma, const float* beta,
                                   float* s_out, void* h, DType h_dtype, float* mean, float* rstd, int64_t N, int C,
                                   float eps, void* stream);
// How many blocks (rows of dgamma_part / dbeta_part, each (blocks, C) fp32) add_layer_norm_backward uses for N rows.
int add_layer_norm_backward_blocks(int64_t N);
const char* add_layer_norm_backward(const void* dh, DType h_dtype, const float* ds_in, const float* s,
                                    const float* gamma, const float* mean, const float* rstd, float* ds_out,
                                    void* dy_out, DType y_dtype, float* dgamma_part, float* dbeta_part, int blocks,
                                    int64_t N, int C, void* stream);

}  // namespace ampcheck::kernels::cuda
