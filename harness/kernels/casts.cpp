// Casts and widening sums in one pass (casts.h): the ATen references and the dispatch to casts.cu.
#include "kernels/casts.h"

#include "kernels/dispatch.h"

#include <algorithm>

namespace ampcheck::kernels {

using namespace detail;  // kernel_dtype_ok; with the CUDA kernels also aligned, kernel_dtype (dispatch.h)

std::vector<at::Tensor> cast_many(const std::vector<at::Tensor>& srcs, at::ScalarType dtype, Impl impl) {
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "cast_many: dtype must be float16 or bfloat16, got ",
              dtype);
  std::vector<at::Tensor> out;
  out.reserve(srcs.size());
  at::NoGradGuard no_grad;
#ifdef AMPCHECK_CUDA_KERNELS
  bool kernel = impl == Impl::Auto && !srcs.empty();
  for (const auto& t : srcs)
    kernel =
        kernel && t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.device() == srcs[0].device();
  if (kernel) {
    std::vector<int64_t> offset;  // each result's first element in the buffer, a multiple of 8 (16 bytes)
    int64_t total = 0;
    for (const auto& t : srcs) {
      offset.push_back(total);
      total += (t.numel() + 7) / 8 * 8;
    }
    at::Tensor buf = at::empty({std::max<int64_t>(total, 1)}, srcs[0].options().dtype(dtype));
    std::vector<const float*> src;
    std::vector<void*> dst;
    std::vector<int64_t> numel;
    for (size_t i = 0; i < srcs.size(); ++i) {
      at::Tensor v = buf.narrow(0, offset[i], srcs[i].numel()).view(srcs[i].sizes());
      src.push_back(srcs[i].data_ptr<float>());
      dst.push_back(v.data_ptr());
      numel.push_back(srcs[i].numel());
      out.push_back(std::move(v));
    }
    const char* err = cuda::cast_many(src.data(), dst.data(), numel.data(), static_cast<int>(src.size()),
                                      kernel_dtype(dtype), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "cast_many: ", err);
    return out;
  }
#endif
  (void)impl;
  for (const auto& t : srcs) out.push_back(t.to(dtype));
  return out;
}

at::Tensor widen_sum(const std::vector<at::Tensor>& parts, Impl impl) {
  TORCH_CHECK(!parts.empty() && parts.size() <= 8, "widen_sum: 1 to 8 parts, got ", parts.size());
  for (const auto& t : parts)
    TORCH_CHECK(
        t.sizes() == parts[0].sizes() && t.scalar_type() == parts[0].scalar_type() && t.device() == parts[0].device(),
        "widen_sum: parts of one shape, dtype and device");
  at::NoGradGuard no_grad;
#ifdef AMPCHECK_CUDA_KERNELS
  const at::ScalarType dt = parts[0].scalar_type();
  if (impl == Impl::Auto && parts[0].is_cuda() && (dt == at::kHalf || dt == at::kBFloat16)) {
    std::vector<at::Tensor> held;
    std::vector<const void*> ptrs;
    for (const auto& t : parts) {
      held.push_back(aligned(t.contiguous()));
      ptrs.push_back(held.back().data_ptr());
    }
    at::Tensor out = at::empty(parts[0].sizes(), parts[0].options().dtype(at::kFloat));
    const char* err = cuda::widen_sum(ptrs.data(), static_cast<int>(ptrs.size()), kernel_dtype(dt),
                                      out.data_ptr<float>(), out.numel(), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "widen_sum: ", err);
    return out;
  }
#endif
  (void)impl;
  at::Tensor out = parts[0].to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  for (size_t k = 1; k < parts.size(); ++k) out.add_(parts[k]);
  return out;
}

}  // namespace ampcheck::kernels
