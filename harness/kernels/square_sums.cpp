// Sums of squares with the non-finite check, and their partials (square_sums.h): the ATen references and the
// dispatch to square_sums.cu.
#include "kernels/square_sums.h"

#include "kernels/dispatch.h"

#include <algorithm>
#include <iterator>

namespace ampcheck::kernels {

using detail::check_parts;
using detail::kernel_dtype_ok;
#ifdef AMPCHECK_CUDA_KERNELS
using detail::aligned;
using detail::kernel_dtype;
#endif

std::pair<at::Tensor, at::Tensor> square_sum_nonfinite(const std::vector<at::Tensor>& ts, Impl impl) {
  at::NoGradGuard no_grad;
  for (const auto& t : ts) {
    TORCH_CHECK(t.defined() && kernel_dtype_ok(t.scalar_type()),
                "square_sum_nonfinite: tensors must be float32, float16 or bfloat16");
    TORCH_CHECK(t.device() == ts[0].device(), "square_sum_nonfinite: tensors on one device");
  }
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ts.empty() ? at::Device(at::kCPU) : ts[0].device());
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && !ts.empty() && ts[0].is_cuda()) {
    // by dtype, in first-seen order; the partial rows of every group in one buffer
    std::vector<std::pair<at::ScalarType, std::vector<at::Tensor>>> groups;
    for (const auto& t : ts) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == t.scalar_type(); });
      if (it == groups.end()) {
        groups.push_back({t.scalar_type(), {}});
        it = std::prev(groups.end());
      }
      it->second.push_back(t.contiguous());
    }
    std::vector<std::vector<const void*>> src(groups.size());
    std::vector<std::vector<int64_t>> numel(groups.size());
    int64_t P = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (const auto& t : groups[g].second) {
        src[g].push_back(t.data_ptr());
        numel[g].push_back(t.numel());
      }
      P += cuda::square_sums_blocks(numel[g].data(), static_cast<int>(numel[g].size()));
    }
    at::Tensor part_sum = at::empty({std::max<int64_t>(P, 1)}, f32),
               part_bad = at::empty({std::max<int64_t>(P, 1)}, f32.dtype(at::kInt));
    at::Tensor out = at::empty({2}, f32);
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    int64_t at_part = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const int n = static_cast<int>(src[g].size());
      const char* err =
          cuda::square_sums(src[g].data(), numel[g].data(), n, kernel_dtype(groups[g].first),
                            part_sum.data_ptr<float>() + at_part, part_bad.data_ptr<int>() + at_part, stream);
      TORCH_CHECK(err == nullptr, "square_sum_nonfinite: ", err);
      at_part += cuda::square_sums_blocks(numel[g].data(), n);
    }
    const char* err = cuda::square_sums_total(part_sum.data_ptr<float>(), part_bad.data_ptr<int>(), P,
                                              out.data_ptr<float>(), out.data_ptr<float>() + 1, stream);
    TORCH_CHECK(err == nullptr, "square_sum_nonfinite: ", err);
    return {out.select(0, 0), out.select(0, 1)};
  }
#endif
  (void)impl;
  at::Tensor sum = at::zeros({}, f32), found = at::zeros({}, f32);
  for (const auto& t : ts) {
    at::Tensor tf = t.to(at::kFloat);
    sum += tf.square().sum();
    found = at::maximum(found, tf.isfinite().logical_not().any().to(at::kFloat));
  }
  return {sum, found};
}

namespace {
constexpr int64_t kPartElems = 8192;  // the kernels' partition (kernels_cuda.h), which builds without them share
#ifdef AMPCHECK_CUDA_KERNELS
static_assert(kPartElems == cuda::kSquareSumBlockElems, "the reference's partials must be the kernels'");
#endif
}  // namespace

namespace detail {
void check_parts(const std::vector<at::Tensor>& ts, const at::Tensor& part_sum, const std::vector<int64_t>& first_part,
                 const char* what) {
  TORCH_CHECK(first_part.size() == ts.size(), what, ": one first partial per tensor");
  TORCH_CHECK(part_sum.dim() == 1 && part_sum.scalar_type() == at::kFloat && part_sum.is_contiguous(), what,
              ": part_sum must be a contiguous 1-dim float32 tensor");
  for (size_t t = 0; t < ts.size(); ++t) {
    TORCH_CHECK(ts[t].scalar_type() == at::kFloat && ts[t].is_contiguous() && ts[t].device() == part_sum.device(), what,
                ": tensors must be contiguous float32 on part_sum's device");
    TORCH_CHECK(first_part[t] >= 0 && first_part[t] + square_sum_parts(ts[t].numel()) <= part_sum.numel(), what,
                ": tensor ", t, "'s partials fall outside part_sum");
  }
}
}  // namespace detail

int64_t square_sum_parts(int64_t numel) { return (numel + kPartElems - 1) / kPartElems; }

at::Tensor square_sum_total(const at::Tensor& part_sum, Impl impl) {
  TORCH_CHECK(part_sum.dim() == 1 && part_sum.scalar_type() == at::kFloat && part_sum.is_contiguous(),
              "square_sum_total: part_sum must be a contiguous 1-dim float32 tensor");
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && part_sum.is_cuda()) {
    at::Tensor out = at::empty({2}, part_sum.options());
    const char* err =
        cuda::square_sums_total(part_sum.data_ptr<float>(), nullptr, part_sum.numel(), out.data_ptr<float>(),
                                out.data_ptr<float>() + 1, at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "square_sum_total: ", err);
    return out.select(0, 0);
  }
#endif
  (void)impl;
  return part_sum.to(at::kDouble).sum().to(at::kFloat);
}

void square_sum_parts_(const std::vector<at::Tensor>& ts, at::Tensor& part_sum, const std::vector<int64_t>& first_part,
                       Impl impl) {
  at::NoGradGuard no_grad;
  check_parts(ts, part_sum, first_part, "square_sum_parts_");
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && part_sum.is_cuda()) {
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    for (size_t t = 0; t < ts.size(); ++t) {  // one launch each: these are the few tensors the optimizer skipped
      const void* src = ts[t].data_ptr();
      const int64_t n = ts[t].numel();
      if (n == 0) continue;
      // square_sums writes flags too: into a scratch row of the same length
      at::Tensor bad = at::empty({square_sum_parts(n)}, part_sum.options().dtype(at::kInt));
      const char* err = cuda::square_sums(&src, &n, 1, cuda::DType::Float32, part_sum.data_ptr<float>() + first_part[t],
                                          bad.data_ptr<int>(), stream);
      TORCH_CHECK(err == nullptr, "square_sum_parts_: ", err);
    }
    return;
  }
#endif
  (void)impl;
  for (size_t t = 0; t < ts.size(); ++t) {  // each block's Σ x² by ATen: zero-padded to whole blocks, one row each
    const int64_t n = ts[t].numel(), P = square_sum_parts(n);
    if (P == 0) continue;
    at::Tensor padded = at::zeros({P * kPartElems}, ts[t].options());
    padded.narrow(0, 0, n).copy_(ts[t].reshape({-1}));
    part_sum.narrow(0, first_part[t], P).copy_(padded.view({P, kPartElems}).square().sum(1));
  }
}

}  // namespace ampcheck::kernels
