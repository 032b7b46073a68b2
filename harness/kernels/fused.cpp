// Fused kernels: the ATen references and the dispatch to the CUDA kernels (fused.h).
#include "kernels/fused.h"

#ifdef AMPCHECK_CUDA_KERNELS
#include "kernels/kernels_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#endif

namespace ampcheck::kernels {

bool cuda_kernels_built() {
#ifdef AMPCHECK_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

namespace {
void check_rows(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& row_loss,
                const at::Tensor& factor) {
  TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "cross_entropy_rows_: logits must be (rows, V) with rows contiguous");
  const auto dt = logits.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16,
              "cross_entropy_rows_: logits must be float32, float16 or bfloat16, got ", dt);
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.scalar_type() == at::kLong,
              "cross_entropy_rows_: targets must be (rows,) int64");
  TORCH_CHECK(row_loss.dim() == 1 && row_loss.size(0) == logits.size(0) && row_loss.scalar_type() == at::kFloat,
              "cross_entropy_rows_: row_loss must be (rows,) float32");
  TORCH_CHECK(factor.numel() == 1 && factor.scalar_type() == at::kFloat, "cross_entropy_rows_: factor must be one float32");
  for (const auto* t : {&targets, &row_loss, &factor})
    TORCH_CHECK(t->device() == logits.device(), "cross_entropy_rows_: every tensor on the logits' device");
}

void reference(at::Tensor& logits, const at::Tensor& targets, at::Tensor& row_loss, const at::Tensor& factor,
               int64_t ignore_index) {
  at::NoGradGuard no_grad;
  const int64_t V = logits.size(1);
  at::Tensor lf = logits.to(at::kFloat);
  at::Tensor lse = at::logsumexp(lf, {1});
  at::Tensor valid = targets != ignore_index;
  at::Tensor bad = valid.logical_and(targets.lt(0).logical_or(targets.ge(V)));
  at::Tensor idx = at::where(valid.logical_and(bad.logical_not()), targets, at::zeros_like(targets)).unsqueeze(1);
  at::Tensor nan = at::full({}, std::numeric_limits<double>::quiet_NaN(), lf.options());
  at::Tensor loss = at::where(valid, lse - lf.gather(1, idx).squeeze(1), at::zeros({}, lf.options()));
  row_loss.copy_(at::where(bad, nan, loss));
  at::Tensor p = lf.sub_(lse.unsqueeze(1)).exp_();
  p.scatter_add_(1, idx, -valid.logical_and(bad.logical_not()).to(at::kFloat).unsqueeze(1));
  at::Tensor f = at::where(bad, nan, at::where(valid, factor.reshape({}), at::zeros({}, lf.options())));
  logits.copy_(p.mul_(f.unsqueeze(1)));
}
}  // namespace

void cross_entropy_rows_(at::Tensor& logits, const at::Tensor& targets, at::Tensor& row_loss, const at::Tensor& factor,
                         int64_t ignore_index, Impl impl) {
  check_rows(logits, targets, row_loss, factor);
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && logits.is_cuda()) {
    const auto dt = logits.scalar_type();
    const auto kd = dt == at::kFloat ? cuda::DType::Float32 : dt == at::kHalf ? cuda::DType::Float16 : cuda::DType::BFloat16;
    at::Tensor t = targets.contiguous(), f = factor.contiguous();
    TORCH_CHECK(row_loss.is_contiguous(), "cross_entropy_rows_: row_loss must be contiguous");
    const char* err = cuda::cross_entropy_rows(logits.data_ptr(), kd, logits.size(0), logits.size(1), logits.stride(0),
                                               t.data_ptr<int64_t>(), row_loss.data_ptr<float>(), f.data_ptr<float>(),
                                               ignore_index, at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "cross_entropy_rows_: CUDA kernel launch failed: ", err);
    return;
  }
#endif
  reference(logits, targets, row_loss, factor, ignore_index);
}

}  // namespace ampcheck::kernels
