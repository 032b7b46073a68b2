// Chunked output projection + cross-entropy (head_loss.h).
#include "models/head_loss.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

namespace ampcheck::models {

namespace {
int64_t rows_per_chunk(int64_t requested, int64_t V) {
  if (requested > 0) return requested;
  return std::max<int64_t>(1, (int64_t{256} << 20) / (4 * std::max<int64_t>(V, 1)));
}

struct ChunkedHeadCrossEntropy : public torch::autograd::Function<ChunkedHeadCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& targets, int64_t chunk_rows) {
    const int64_t N = x.size(0), V = w.size(0), R = rows_per_chunk(chunk_rows, V);
    at::Tensor lse = at::empty({N}, x.options().dtype(at::kFloat));
    at::Tensor total = at::zeros({}, x.options().dtype(at::kFloat));
    at::ScalarType logits_dtype = x.scalar_type();
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t n = std::min(R, N - r0);
      at::Tensor logits = at::linear(x.narrow(0, r0, n), w);  // autocast applies here exactly as to the stock head
      logits_dtype = logits.scalar_type();
      at::Tensor lf = logits.to(at::kFloat);
      at::Tensor l = at::logsumexp(lf, {1});
      lse.narrow(0, r0, n).copy_(l);
      total += (l - lf.gather(1, targets.narrow(0, r0, n).unsqueeze(1)).squeeze(1)).sum();
    }
    ctx->save_for_backward({x, w, targets, lse});
    ctx->saved_data["chunk"] = R;
    ctx->saved_data["logits_dtype"] = static_cast<int64_t>(logits_dtype);
    return total / static_cast<double>(N);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &targets = saved[2], &lse = saved[3];
    const int64_t N = x.size(0), R = ctx->saved_data["chunk"].toInt();
    const auto dt = static_cast<at::ScalarType>(ctx->saved_data["logits_dtype"].toInt());
    const at::Tensor g = grads[0].to(at::kFloat) / static_cast<double>(N);  // d loss / d logit scale (0-dim)
    at::Tensor wc = w.to(dt), xc = x.to(dt);
    at::Tensor dx = at::empty_like(x);
    at::Tensor dw = at::zeros(w.sizes(), w.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t n = std::min(R, N - r0);
      at::Tensor x_c = xc.narrow(0, r0, n);
      at::Tensor p = at::matmul(x_c, wc.t()).to(at::kFloat).sub_(lse.narrow(0, r0, n).unsqueeze(1)).exp_();
      p.scatter_add_(1, targets.narrow(0, r0, n).unsqueeze(1), at::full({n, 1}, -1.0, p.options()));
      at::Tensor gl = p.mul_(g).to(dt);  // as the stock path: fp32 grad of the logits, cast to the logits' dtype
      dx.narrow(0, r0, n).copy_(at::matmul(gl, wc));
      if (dt == at::kFloat) dw.addmm_(gl.t(), x_c);
      else dw.add_(at::matmul(gl.t(), x_c));  // the chunk's wgrad in the logits' dtype (as the stock GEMM's output)
    }
    return {dx, dw.to(w.scalar_type()), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor chunked_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                      int64_t chunk_rows) {
  return ChunkedHeadCrossEntropy::apply(x, w, targets, chunk_rows);
}

}  // namespace ampcheck::models
