// Internal to harness/kernels/*.cpp (the build gives AMPCHECK_CUDA_KERNELS to the kernels library alone): what the
// ops' dispatch to the CUDA kernels shares — the dtypes the kernels take, the alignment they want, the partials'
// checks of square_sums.cpp and adamw.cpp.
#pragma once

#include "kernels/impl.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <vector>

#ifdef AMPCHECK_CUDA_KERNELS
#include "kernels/kernels_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#endif

namespace ampcheck::kernels::detail {

inline bool kernel_dtype_ok(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }
#ifdef AMPCHECK_CUDA_KERNELS
inline cuda::DType kernel_dtype(at::ScalarType t) {
  return t == at::kFloat ? cuda::DType::Float32 : t == at::kHalf ? cuda::DType::Float16 : cuda::DType::BFloat16;
}

// the kernels' vector loads want 16-byte aligned rows: a view that starts elsewhere is copied (fresh allocations are
// aligned; this is the rare case)
inline at::Tensor aligned(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
}
#endif

// part_sum and first_part laid out for ts as square_sum_parts_ wants them (square_sums.cpp); `what` names the caller.
void check_parts(const std::vector<at::Tensor>& ts, const at::Tensor& part_sum, const std::vector<int64_t>& first_part,
                 const char* what);

}  // namespace ampcheck::kernels::detail
