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
