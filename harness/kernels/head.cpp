// The fused head's ops (head.h): the ATen references and the dispatch to cross_entropy_rows.cu and
// embedding_rows.cu.
#include "kernels/head.h"

#include "kernels/dispatch.h"

#include <limits>

namespace ampcheck::kernels {

using namespace detail;  // kernel_dtype_ok; with the CUDA kernels also aligned, kernel_dtype (dispatch.h)

namespace {
void check_rows(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& row_loss,
                const at::Tensor& factor) {
  TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1,
              "cross_entropy_rows_: logits must be (rows, V) with rows contiguous");
  TORCH_CHECK(kernel_dtype_ok(logits.scalar_type()),
              "cross_entropy_rows_: logits must be float32, float16 or bfloat16, got ", logits.scalar_type());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.scalar_type() == at::kLong,
              "cross_entropy_rows_: targets must be (rows,) int64");
  TORCH_CHECK(row_loss.dim() == 1 && row_loss.size(0) == logits.size(0) && row_loss.scalar_type() == at::kFloat,
              "cross_entropy_rows_: row_loss must be (rows,) float32");
  TORCH_CHECK(factor.numel() == 1 && factor.scalar_type() == at::kFloat,
              "cross_entropy_rows_: factor must be one float32");
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
    at::Tensor t = targets.contiguous(), f = factor.contiguous();
    TORCH_CHECK(row_loss.is_contiguous(), "cross_entropy_rows_: row_loss must be contiguous");
    const char* err =
        cuda::cross_entropy_rows(logits.data_ptr(), kernel_dtype(logits.scalar_type()), logits.size(0), logits.size(1),
                                 logits.stride(0), t.data_ptr<int64_t>(), row_loss.data_ptr<float>(),
                                 f.data_ptr<float>(), ignore_index, at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "cross_entropy_rows_: CUDA kernel launch failed: ", err);
    return;
  }
#endif
  reference(logits, targets, row_loss, factor, ignore_index);
}

void embedding_backward_add_(at::Tensor& grad, const at::Tensor& rows, const at::Tensor& indices, Impl impl) {
  TORCH_CHECK(grad.dim() == 2 && rows.dim() == 2 && rows.size(1) == grad.size(1) && indices.numel() == rows.size(0) &&
                  indices.scalar_type() == at::kLong,
              "embedding_backward_add_: expected grad (V, C), rows (N, C) and N int64 indices");
  at::NoGradGuard no_grad;
  const at::Tensor idx = indices.reshape({-1});
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && grad.is_cuda() && grad.scalar_type() == at::kFloat && rows.scalar_type() == at::kFloat &&
      grad.is_contiguous() && grad.size(1) % 4 == 0 && grad.size(1) <= 4096 &&
      reinterpret_cast<uintptr_t>(grad.data_ptr()) % 16 == 0) {
    const at::Tensor r = aligned(rows.contiguous());
    // 32-bit keys (half the radix sort's passes); tokens outside int32 would be out of range of any embedding anyway
    auto [sorted, order] =
        at::sort(idx.clamp(-1, grad.size(0)).to(at::kInt), /*stable=*/true, /*dim=*/0, /*descending=*/false);
    const int C = static_cast<int>(r.size(1));
    at::Tensor scratch = at::empty({cuda::embedding_rows_scratch(r.size(0), C)}, grad.options());
    const char* err = cuda::embedding_rows_add(sorted.data_ptr<int32_t>(), order.data_ptr<int64_t>(),
                                               r.data_ptr<float>(), grad.data_ptr<float>(), scratch.data_ptr<float>(),
                                               r.size(0), C, grad.size(0), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "embedding_backward_add_: ", err);
    return;
  }
#endif
  (void)impl;
  grad.add_(at::embedding_dense_backward(rows, idx, grad.size(0), /*padding_idx=*/-1, /*scale_grad_by_freq=*/false));
}

void scale_unless_one_(at::Tensor& x, const at::Tensor& r, Impl impl) {
  TORCH_CHECK(r.numel() == 1 && r.scalar_type() == at::kFloat && r.device() == x.device(),
              "scale_unless_one_: r must be one float32 on x's device");
  at::NoGradGuard no_grad;
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && x.is_cuda() && x.is_contiguous() && kernel_dtype_ok(x.scalar_type())) {
    const at::Tensor rc = r.contiguous();
    const char* err = cuda::scale_unless_one(x.data_ptr(), kernel_dtype(x.scalar_type()), x.numel(),
                                             rc.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "scale_unless_one_: ", err);
    return;
  }
#endif
  (void)impl;
  x.mul_(r.reshape({}));
}

}  // namespace ampcheck::kernels
