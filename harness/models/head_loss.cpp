// Chunked output projection + cross-entropy (head_loss.h).
#include "models/head_loss.h"

#include "kernels/fused.h"
#include "kernels/gemm_epilogues.h"

#include <ampcheck/amp/autocast.h>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <utility>

namespace ampcheck::models {

namespace {
constexpr int64_t kIgnoreIndex = -100;  // at::cross_entropy_loss's default

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
      else
        dw.add_(at::matmul(gl.t(), x_c));  // the chunk's wgrad in the logits' dtype (as the stock GEMM's output)
    }
    return {dx, dw.to(w.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

// Rows per chunk of the fused head: as few chunks as keep a chunk's logits (in their dtype) within 512 MiB, rows
// split evenly and rounded up to 64.
int64_t fused_rows_per_chunk(int64_t requested, int64_t N, int64_t V, int64_t elem) {
  if (requested > 0) return requested;
  const int64_t bytes = std::max<int64_t>(1, N) * std::max<int64_t>(1, V) * elem;
  const int64_t chunks = std::max<int64_t>(1, (bytes + (int64_t{512} << 20) - 1) / (int64_t{512} << 20));
  const int64_t rows = (N + chunks - 1) / chunks;
  return std::max<int64_t>(1, (rows + 63) / 64 * 64);
}

struct FusedHeadCrossEntropy : public torch::autograd::Function<FusedHeadCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& targets, int64_t chunk_rows, const at::Tensor& grad_scale_hint,
                            bool need_grads, bool fp32_wgrad, const std::optional<at::Tensor>& w_cast,
                            int64_t tied_address, int64_t compute_dtype) {
    const at::ScalarType dt = static_cast<at::ScalarType>(compute_dtype);
    const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
    const int64_t R = fused_rows_per_chunk(chunk_rows, N, V, at::elementSize(dt));
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor xc = x.to(dt);
    at::Tensor wc = w_cast && w_cast->defined() && w_cast->scalar_type() == dt ? *w_cast : w.to(dt);
    at::Tensor n_valid = (targets != kIgnoreIndex).sum().to(at::kFloat);
    at::Tensor hint = grad_scale_hint.to(f32).reshape({});
    at::Tensor factor = hint / n_valid;  // the stock backward's d loss / d logit scale at the hinted loss scale
    at::Tensor row_loss = at::empty({N}, f32);
    at::Tensor dx, dw;
    // model.gemm_epilogues: the chunks' weight gradients summed inside the GEMM (cuBLASLt, CUDA, bf16; elsewhere as
    // without the option)
    const bool wgrad_in_gemm = fp32_wgrad && dt == at::kBFloat16 && x.is_cuda() && kernels::gemm_epilogues_built();
    // the chunks' weight gradients in dt, summed at the end in one pass (kernels::widen_sum: fp32, chunk order)
    const int64_t chunks = (N + R - 1) / R;
    const bool sum_at_end = dt != at::kFloat && !wgrad_in_gemm && chunks <= 8;
    std::vector<at::Tensor> dw_parts;
    if (need_grads) {
      dx = at::empty({N, C}, xc.options());
      if (wgrad_in_gemm) dw = at::empty({V, C}, f32);
      else if (!sum_at_end)
        dw = at::zeros({V, C}, f32);
    }
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t n = std::min(R, N - r0);
      at::Tensor x_c = xc.narrow(0, r0, n);
      at::Tensor logits = at::mm(x_c, wc.t());  // (n, V) in dt, as the stock head computes them
      at::Tensor loss_c = row_loss.narrow(0, r0, n);
      kernels::cross_entropy_rows_(logits, targets.narrow(0, r0, n), loss_c, factor, kIgnoreIndex);
      if (!need_grads) continue;
      at::Tensor dx_c = dx.narrow(0, r0, n);
      at::mm_out(dx_c, logits, wc);  // grad_logits W, in dt (fp32 accumulation inside the GEMM)
      if (dt == at::kFloat) dw.addmm_(logits.t(), x_c);
      else if (wgrad_in_gemm)
        kernels::wgrad_fp32_(dw, logits, x_c, /*accumulate=*/r0 > 0);
      else if (sum_at_end)
        dw_parts.push_back(at::mm(logits.t(), x_c));  // the chunk's wgrad in dt (as the stock GEMM's)
      else
        dw.add_(at::mm(logits.t(), x_c));  // the chunk's wgrad in dt (as the stock GEMM's output), summed in fp32
    }
    if (need_grads && sum_at_end) dw = kernels::widen_sum(dw_parts);
    if (need_grads) {
      ctx->save_for_backward({dx, dw, hint});
      ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
      ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
      ctx->saved_data["tied"] = tied_address;
    }
    return row_loss.sum() / n_valid;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    TORCH_CHECK(saved.size() == 3, "fused head: backward of a forward that computed no gradients");
    const at::Tensor &dx = saved[0], &dw = saved[1], &hint = saved[2];
    // the forward computed the gradient at the hinted loss scale; backward brings the one really used (ratio 1
    // on the normal path: scaler.scale(loss).backward() with the scale the hint named)
    const at::Tensor ratio = grads[0].to(at::kFloat).reshape({}) / hint;
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    // the product in fp32 (0-dim ratio), rounded once to x's dtype: in place (no pass while the ratio is 1) when x
    // has dx's dtype. The saved gradients are scaled in place: this backward runs once (the graph is not retained).
    at::Tensor gx = dx, gw = dw;
    if (x_dtype == dx.scalar_type()) kernels::scale_unless_one_(gx, ratio);
    else
      gx = dx.to(x_dtype) * ratio;
    if (w_dtype == dw.scalar_type()) kernels::scale_unless_one_(gw, ratio);
    else
      gw = (dw * ratio).to(w_dtype);
    if (auto* tied = reinterpret_cast<TiedGradient*>(ctx->saved_data["tied"].toInt());
        tied && ctx->needs_input_grad(1)) {
      tied->grad = gw;  // tied_embedding's backward adds the lookup's rows and returns it
      gw = at::Tensor();
    }
    return {gx,           gw,           at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor fused_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                    int64_t chunk_rows, const at::Tensor& grad_scale_hint, bool fp32_wgrad,
                                    const at::Tensor& w_cast, TiedGradient* tied,
                                    std::optional<at::ScalarType> compute_dtype) {
  // at::linear's dtype under the caller's autocast where the caller does not say
  const at::ScalarType dt = compute_dtype ? *compute_dtype : amp::autocast_dtype_or(x.device().type(), x.scalar_type());
  const bool need_grads = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  // (an undefined tensor cannot pass through a custom Function: 1 as a tensor)
  const at::Tensor hint = grad_scale_hint.defined() ? grad_scale_hint : at::ones({}, x.options().dtype(at::kFloat));
  const std::optional<at::Tensor> cast = w_cast.defined() ? std::optional<at::Tensor>(w_cast) : std::nullopt;
  return FusedHeadCrossEntropy::apply(x, w, targets, chunk_rows, hint, need_grads, fp32_wgrad, cast,
                                      reinterpret_cast<int64_t>(tied), static_cast<int64_t>(dt));
}

namespace {
struct TiedEmbedding : public torch::autograd::Function<TiedEmbedding> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& w, const at::Tensor& indices,
                            int64_t tied_address) {
    ctx->save_for_backward({indices});
    ctx->saved_data["tied"] = tied_address;
    ctx->saved_data["w_sizes"] = w.sizes();
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return at::embedding(w, indices);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor indices = ctx->get_saved_variables()[0];
    auto* tied = reinterpret_cast<TiedGradient*>(ctx->saved_data["tied"].toInt());
    const auto w_sizes = ctx->saved_data["w_sizes"].toIntVector();
    at::Tensor gw = std::exchange(tied->grad, at::Tensor());  // the head's gradient for w (undefined if it left none)
    const at::Tensor& g = grads[0];
    if (!gw.defined())
      gw = at::zeros(w_sizes, g.options().dtype(static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt())));
    kernels::embedding_backward_add_(gw, g.reshape({-1, w_sizes[1]}), indices.reshape({-1}));
    return {gw, at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor tied_embedding(const at::Tensor& w, const at::Tensor& indices, TiedGradient* tied) {
  TORCH_CHECK(tied != nullptr, "tied_embedding: needs the TiedGradient the fused head shares");
  return TiedEmbedding::apply(w, indices, reinterpret_cast<int64_t>(tied));
}

at::Tensor chunked_head_cross_entropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                      int64_t chunk_rows) {
  return ChunkedHeadCrossEntropy::apply(x, w, targets, chunk_rows);
}

}  // namespace ampcheck::models
