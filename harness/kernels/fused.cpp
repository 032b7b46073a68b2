// Fused kernels: the ATen references and the dispatch to the CUDA kernels (fused.h).
#include "kernels/fused.h"

#include <algorithm>

#include <ampcheck/amp/autocast.h>

#include <torch/csrc/autograd/custom_function.h>

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
bool kernel_dtype_ok(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }
#ifdef AMPCHECK_CUDA_KERNELS
cuda::DType kernel_dtype(at::ScalarType t) {
  return t == at::kFloat ? cuda::DType::Float32 : t == at::kHalf ? cuda::DType::Float16 : cuda::DType::BFloat16;
}
#endif

void check_rows(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& row_loss,
                const at::Tensor& factor) {
  TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "cross_entropy_rows_: logits must be (rows, V) with rows contiguous");
  TORCH_CHECK(kernel_dtype_ok(logits.scalar_type()),
              "cross_entropy_rows_: logits must be float32, float16 or bfloat16, got ", logits.scalar_type());
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
    at::Tensor t = targets.contiguous(), f = factor.contiguous();
    TORCH_CHECK(row_loss.is_contiguous(), "cross_entropy_rows_: row_loss must be contiguous");
    const char* err = cuda::cross_entropy_rows(logits.data_ptr(), kernel_dtype(logits.scalar_type()), logits.size(0), logits.size(1), logits.stride(0),
                                               t.data_ptr<int64_t>(), row_loss.data_ptr<float>(), f.data_ptr<float>(),
                                               ignore_index, at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "cross_entropy_rows_: CUDA kernel launch failed: ", err);
    return;
  }
#endif
  reference(logits, targets, row_loss, factor, ignore_index);
}

namespace {
// with_bias_gradient (fused.h)
struct BiasTapFn : public torch::autograd::Function<BiasTapFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& bias) {
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return y.view_as(y);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& dy = grads[0];
    at::Tensor db = dy.reshape({-1, dy.size(-1)}).sum(0).to(static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    return {dy, db};
  }
};

}  // namespace

at::Tensor with_bias_gradient(const at::Tensor& y, const at::Tensor& bias) {
  TORCH_CHECK(bias.dim() == 1 && y.dim() >= 1 && y.size(-1) == bias.size(0), "with_bias_gradient: bias must be (y.size(-1),)");
  return BiasTapFn::apply(y, bias);
}

namespace {
std::pair<at::Tensor, at::Tensor> add_layer_norm_reference(const at::Tensor& x, const at::Tensor& y,
                                                           const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                                           at::ScalarType out_dtype, const at::Tensor& y_bias) {
  at::Tensor s = y.defined() ? x + (y_bias.defined() ? with_bias_gradient(y, y_bias) : y) : x;
  return {s, at::layer_norm(s, {s.size(-1)}, gamma, beta, eps).to(out_dtype)};
}

#ifdef AMPCHECK_CUDA_KERNELS
// the kernels' vector loads want 16-byte aligned rows: a view that starts elsewhere is copied (fresh allocations are
// aligned; this is the rare case)
at::Tensor aligned(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
}

// (x, y, γ, β, y's bias) -> (s, h) with has_y; without (y is then a placeholder): (h), s being x itself (the wrapper
// returns x). The bias is not read (y holds it already); with has_bias its gradient comes from this backward.
struct AddLayerNormFn : public torch::autograd::Function<AddLayerNormFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& y, const at::Tensor& gamma, const at::Tensor& beta,
                                                const at::Tensor& bias, double eps, int64_t out_dtype_i, bool has_y,
                                                bool has_bias) {
    const auto out_dtype = static_cast<at::ScalarType>(out_dtype_i);
    const int64_t C = x.size(-1), N = x.numel() / C;
    at::Tensor xc = x.contiguous(), yc = has_y ? y.contiguous() : at::Tensor();
    at::Tensor s = has_y ? at::empty_like(xc) : xc;
    at::Tensor h = at::empty(x.sizes(), x.options().dtype(out_dtype));
    at::Tensor mean = at::empty({N}, x.options()), rstd = at::empty({N}, x.options());
    const char* err = cuda::add_layer_norm_forward(
        xc.data_ptr<float>(), has_y ? yc.data_ptr() : nullptr, kernel_dtype(has_y ? yc.scalar_type() : at::kFloat),
        gamma.contiguous().data_ptr<float>(), beta.contiguous().data_ptr<float>(), has_y ? s.data_ptr<float>() : nullptr,
        h.data_ptr(), kernel_dtype(out_dtype), mean.data_ptr<float>(), rstd.data_ptr<float>(), N, static_cast<int>(C),
        static_cast<float>(eps), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "add_layer_norm: ", err);
    ctx->save_for_backward({s, gamma, mean, rstd});
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(has_y ? y.scalar_type() : at::kFloat);
    ctx->saved_data["has_y"] = has_y;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    if (!has_y) return {h};
    return {s, h};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &s = saved[0], &gamma = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool has_y = ctx->saved_data["has_y"].toBool();
    const auto y_dtype = static_cast<at::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    const at::Tensor ds_in = has_y && grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    at::Tensor dh = grads[has_y ? 1 : 0];
    const int64_t C = s.size(-1), N = s.numel() / C;
    if (!dh.defined()) dh = at::zeros(s.sizes(), s.options());
    dh = dh.contiguous();
    at::Tensor ds = at::empty(s.sizes(), s.options());
    const bool y_needs_cast = has_y && y_dtype != at::kFloat;
    at::Tensor dy = y_needs_cast ? at::empty(s.sizes(), s.options().dtype(y_dtype)) : at::Tensor();
    const bool bias = ctx->saved_data["has_bias"].toBool();
    const int blocks = cuda::add_layer_norm_backward_blocks(N, static_cast<int>(C), kernel_dtype(dh.scalar_type()),
                                                            kernel_dtype(y_dtype), bias);
    const int64_t W = (bias ? 3 : 2) * C;
    at::Tensor part = at::empty({blocks, W}, s.options()), dgb = at::empty({W}, s.options());
    const char* err = cuda::add_layer_norm_backward(
        aligned(dh).data_ptr(), kernel_dtype(dh.scalar_type()), ds_in.defined() ? aligned(ds_in).data_ptr<float>() : nullptr,
        aligned(s).data_ptr<float>(), aligned(gamma.contiguous()).data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
        ds.data_ptr<float>(), y_needs_cast ? dy.data_ptr() : nullptr, kernel_dtype(y_dtype), part.data_ptr<float>(),
        dgb.data_ptr<float>(), bias, blocks, N, static_cast<int>(C), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "add_layer_norm backward: ", err);
    at::Tensor dgamma = dgb.narrow(0, 0, C), dbeta = dgb.narrow(0, C, C);
    at::Tensor db = bias ? dgb.narrow(0, 2 * C, C).to(static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt()))
                         : at::Tensor();
    at::Tensor gy = has_y ? (y_needs_cast ? dy : ds) : at::Tensor();
    return {ds, gy, dgamma, dbeta, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
#endif
}  // namespace

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                                                 const at::Tensor& beta, double eps, at::ScalarType out_dtype,
                                                 Impl impl, const at::Tensor& y_bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && gamma.scalar_type() == at::kFloat && beta.scalar_type() == at::kFloat,
              "add_layer_norm: x, gamma and beta must be float32");
  TORCH_CHECK(!y.defined() || y.sizes() == x.sizes(), "add_layer_norm: y must have x's shape");
  TORCH_CHECK(!y_bias.defined() || (y.defined() && y_bias.dim() == 1 && y_bias.size(0) == x.size(-1)),
              "add_layer_norm: y_bias must be (C,) and comes with y");
#ifdef AMPCHECK_CUDA_KERNELS
  const int64_t C = x.size(-1);
  if (impl == Impl::Auto && x.is_cuda() && C <= 1024 && cuda::add_layer_norm_backward_supported(static_cast<int>(C)) &&
      kernel_dtype_ok(out_dtype) &&
      (!y.defined() || y.scalar_type() == at::kFloat || y.scalar_type() == out_dtype)) {
    // autocast off inside: the function decides its own dtypes
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const bool has_y = y.defined(), has_bias = y_bias.defined();
    auto out = AddLayerNormFn::apply(x, has_y ? y : x, gamma, beta, has_bias ? y_bias : gamma, eps,
                                     static_cast<int64_t>(out_dtype), has_y, has_bias);
    if (!has_y) return {x, out[0]};
    return {out[0], out[1]};
  }
#endif
  return add_layer_norm_reference(x, y, gamma, beta, eps, out_dtype, y_bias);
}

std::pair<at::Tensor, at::Tensor> bias_grad(const at::Tensor& g, const at::Tensor& pre, Impl impl) {
  TORCH_CHECK(g.dim() == 2, "bias_grad: g must be (rows, columns)");
  TORCH_CHECK(!pre.defined() || (pre.sizes() == g.sizes() && pre.scalar_type() == g.scalar_type()),
              "bias_grad: pre must have g's shape and dtype");
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && g.is_cuda() && kernel_dtype_ok(g.scalar_type())) {
    at::Tensor gc = aligned(g.contiguous());
    at::Tensor prec = pre.defined() ? aligned(pre.contiguous()) : at::Tensor();
    at::Tensor d = pre.defined() ? at::empty_like(gc) : gc;
    const int64_t R = gc.size(0), C = gc.size(1);
    const int row_blocks = cuda::column_sum_row_blocks(R, C);
    const auto f32 = gc.options().dtype(at::kFloat);
    at::Tensor part = at::empty({row_blocks, C}, f32), sums = at::empty({C}, f32);
    const char* err = cuda::column_sums(gc.data_ptr(), pre.defined() ? prec.data_ptr() : nullptr,
                                        pre.defined() ? d.data_ptr() : nullptr, kernel_dtype(gc.scalar_type()),
                                        part.data_ptr<float>(), row_blocks, sums.data_ptr<float>(), R, C,
                                        at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "bias_grad: ", err);
    return {sums, d};
  }
#endif
  at::NoGradGuard no_grad;
  at::Tensor d = pre.defined() ? at::gelu_backward(g, pre, "tanh") : g;
  return {d.sum(0).to(at::kFloat), d};
}

namespace {
struct LinearBiasGeluFn : public torch::autograd::Function<LinearBiasGeluFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, bool gelu, int64_t dtype_i, int64_t impl_i) {
    const auto dt = static_cast<at::ScalarType>(dtype_i);
    const int64_t K = x.size(-1), N = w.size(0);
    at::Tensor x2 = x.reshape({-1, K}).to(dt), wc = w.to(dt), bc = b.to(dt);
    at::Tensor pre = at::addmm(bc, x2, wc.t());  // what at::linear runs for a (…, K) input with a bias
    at::Tensor out = gelu ? at::gelu(pre, "tanh") : pre;
    ctx->save_for_backward({x2, wc, gelu ? pre : at::Tensor()});
    ctx->saved_data["gelu"] = gelu;
    ctx->saved_data["impl"] = impl_i;
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = N;
    return out.view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &wc = saved[1], &pre = saved[2];
    const bool gelu = ctx->saved_data["gelu"].toBool();
    const auto impl = static_cast<Impl>(ctx->saved_data["impl"].toInt());
    const auto cast = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    at::Tensor g = grads[0].reshape({-1, wc.size(0)});
    if (g.scalar_type() != wc.scalar_type()) g = g.to(wc.scalar_type());  // (the stock addmm's grad is in its dtype)
    // (no column sums where the bias's gradient is taken elsewhere: add_layer_norm's y_bias, a detached bias here)
    auto [db, d] = gelu || ctx->needs_input_grad(2) ? bias_grad(g, gelu ? pre : at::Tensor(), impl)
                                                    : std::pair<at::Tensor, at::Tensor>{at::Tensor(), g};
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::mm(d, wc).view(ctx->saved_data["x_sizes"].toIntVector()).to(cast("x_dtype"));
    if (ctx->needs_input_grad(1)) dw = at::mm(d.t(), x2).to(cast("w_dtype"));
    return {dx, dw, ctx->needs_input_grad(2) ? db.to(cast("b_dtype")) : at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};
}  // namespace

at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu, Impl impl) {
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 2 && b.dim() == 1 && x.size(-1) == w.size(1) && b.size(0) == w.size(0),
              "linear_bias_gelu: expected x (..., K), w (N, K), b (N)");
  const at::ScalarType dt = amp::autocast_dtype_or(x.device().type(), x.scalar_type());  // at::linear's dtype
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // the function casts itself
  return LinearBiasGeluFn::apply(x, w, b, gelu, static_cast<int64_t>(dt), static_cast<int64_t>(impl));
}

std::vector<at::Tensor> cast_many(const std::vector<at::Tensor>& srcs, at::ScalarType dtype, Impl impl) {
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "cast_many: dtype must be float16 or bfloat16, got ", dtype);
  std::vector<at::Tensor> out;
  out.reserve(srcs.size());
  at::NoGradGuard no_grad;
#ifdef AMPCHECK_CUDA_KERNELS
  bool kernel = impl == Impl::Auto && !srcs.empty();
  for (const auto& t : srcs)
    kernel = kernel && t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.device() == srcs[0].device();
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
    TORCH_CHECK(t.sizes() == parts[0].sizes() && t.scalar_type() == parts[0].scalar_type() && t.device() == parts[0].device(),
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
    const char* err = cuda::widen_sum(ptrs.data(), static_cast<int>(ptrs.size()), kernel_dtype(dt), out.data_ptr<float>(),
                                      out.numel(), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "widen_sum: ", err);
    return out;
  }
#endif
  (void)impl;
  at::Tensor out = parts[0].to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  for (size_t k = 1; k < parts.size(); ++k) out.add_(parts[k]);
  return out;
}

void embedding_backward_add_(at::Tensor& grad, const at::Tensor& rows, const at::Tensor& indices, Impl impl) {
  TORCH_CHECK(grad.dim() == 2 && rows.dim() == 2 && rows.size(1) == grad.size(1) && indices.numel() == rows.size(0) &&
                  indices.scalar_type() == at::kLong,
              "embedding_backward_add_: expected grad (V, C), rows (N, C) and N int64 indices");
  at::NoGradGuard no_grad;
  const at::Tensor idx = indices.reshape({-1});
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && grad.is_cuda() && grad.scalar_type() == at::kFloat && rows.scalar_type() == at::kFloat &&
      grad.is_contiguous() && grad.size(1) % 4 == 0 && grad.size(1) <= 4096 && reinterpret_cast<uintptr_t>(grad.data_ptr()) % 16 == 0) {
    const at::Tensor r = aligned(rows.contiguous());
    // 32-bit keys (half the radix sort's passes); tokens outside int32 would be out of range of any embedding anyway
    auto [sorted, order] = at::sort(idx.clamp(-1, grad.size(0)).to(at::kInt), /*stable=*/true, /*dim=*/0, /*descending=*/false);
    const int C = static_cast<int>(r.size(1));
    at::Tensor scratch = at::empty({cuda::embedding_rows_scratch(r.size(0), C)}, grad.options());
    const char* err = cuda::embedding_rows_add(sorted.data_ptr<int32_t>(), order.data_ptr<int64_t>(), r.data_ptr<float>(),
                                               grad.data_ptr<float>(), scratch.data_ptr<float>(), r.size(0), C,
                                               grad.size(0), at::cuda::getCurrentCUDAStream().stream());
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
    const char* err = cuda::scale_unless_one(x.data_ptr(), kernel_dtype(x.scalar_type()), x.numel(), rc.data_ptr<float>(),
                                             at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "scale_unless_one_: ", err);
    return;
  }
#endif
  (void)impl;
  x.mul_(r.reshape({}));
}

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
    at::Tensor part_sum = at::empty({std::max<int64_t>(P, 1)}, f32), part_bad = at::empty({std::max<int64_t>(P, 1)}, f32.dtype(at::kInt));
    at::Tensor out = at::empty({2}, f32);
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    int64_t at_part = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const int n = static_cast<int>(src[g].size());
      const char* err = cuda::square_sums(src[g].data(), numel[g].data(), n, kernel_dtype(groups[g].first),
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


// ---------------------------------------------------------------------------------------------------------------
// Partial sums of squares and AdamW's step with them (train.fused_param_norm)
namespace {
constexpr int64_t kPartElems = 8192;  // the kernels' partition (kernels_cuda.h), which builds without them share
#ifdef AMPCHECK_CUDA_KERNELS
static_assert(kPartElems == cuda::kSquareSumBlockElems, "the reference's partials must be the kernels'");
#endif

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
}  // namespace

int64_t square_sum_parts(int64_t numel) { return (numel + kPartElems - 1) / kPartElems; }

at::Tensor square_sum_total(const at::Tensor& part_sum, Impl impl) {
  TORCH_CHECK(part_sum.dim() == 1 && part_sum.scalar_type() == at::kFloat && part_sum.is_contiguous(),
              "square_sum_total: part_sum must be a contiguous 1-dim float32 tensor");
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && part_sum.is_cuda()) {
    at::Tensor out = at::empty({2}, part_sum.options());
    const char* err = cuda::square_sums_total(part_sum.data_ptr<float>(), nullptr, part_sum.numel(), out.data_ptr<float>(),
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

void adamw_square_sums_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                        const std::vector<at::Tensor>& steps, const at::Tensor& lr, double lr_value, double beta1,
                        double beta2, double weight_decay, double eps, const c10::optional<at::Tensor>& grad_scale,
                        const c10::optional<at::Tensor>& found_inf, at::Tensor& part_sum,
                        const std::vector<int64_t>& first_part, Impl impl, at::Tensor* grad_part_sum) {
  at::NoGradGuard no_grad;
  const size_t n = params.size();
  if (grad_part_sum) {
    TORCH_CHECK(!grad_scale, "adamw_square_sums_: the grads' sums need unscaled grads (no grad_scale)");
    check_parts(grads, *grad_part_sum, first_part, "adamw_square_sums_ (grads)");
  }
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
              "adamw_square_sums_: params, grads, exp_avgs, exp_avg_sqs and steps differ in length");
  check_parts(params, part_sum, first_part, "adamw_square_sums_");
  for (size_t t = 0; t < n; ++t)
    for (const at::Tensor* x : {&grads[t], &exp_avgs[t], &exp_avg_sqs[t]})
      TORCH_CHECK(x->sizes() == params[t].sizes() && x->scalar_type() == at::kFloat && x->is_contiguous() &&
                      x->device() == params[t].device(),
                  "adamw_square_sums_: grads and moments must be contiguous float32 of their parameter's shape and device");
#ifdef AMPCHECK_CUDA_KERNELS
  if (impl == Impl::Auto && part_sum.is_cuda() && (!lr.defined() || lr.is_cuda())) {
    std::vector<float*> p(n), g(n), m(n), v(n);
    std::vector<const float*> st(n);
    std::vector<int64_t> numel(n);
    for (size_t t = 0; t < n; ++t) {
      TORCH_CHECK(steps[t].is_cuda() && steps[t].scalar_type() == at::kFloat && steps[t].numel() == 1,
                  "adamw_square_sums_: steps must be one float32 each on the device");
      p[t] = params[t].data_ptr<float>();
      g[t] = grads[t].data_ptr<float>();
      m[t] = exp_avgs[t].data_ptr<float>();
      v[t] = exp_avg_sqs[t].data_ptr<float>();
      st[t] = steps[t].data_ptr<float>();
      numel[t] = params[t].numel();
    }
    cuda::AdamHyper h;
    h.lr_ptr = lr.defined() ? lr.data_ptr<float>() : nullptr;
    h.lr = static_cast<float>(lr_value);
    h.beta1 = static_cast<float>(beta1);  // ATen's functor: static_cast<opmath_t> of each double
    h.beta2 = static_cast<float>(beta2);
    h.weight_decay = static_cast<float>(weight_decay);
    h.eps = static_cast<float>(eps);
    if (grad_scale) h.grad_scale = grad_scale->data_ptr<float>();
    if (found_inf) h.found_inf = found_inf->data_ptr<float>();
    cuda::AdamTensors ts{p.data(), g.data(), m.data(), v.data(), st.data(), numel.data(), first_part.data()};
    const char* err = cuda::adamw_square_sums(ts, static_cast<int>(n), h, part_sum.data_ptr<float>(),
                                              grad_part_sum ? grad_part_sum->data_ptr<float>() : nullptr,
                                              at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "adamw_square_sums_: ", err);
    return;
  }
#endif
  (void)impl;
  if (grad_part_sum) square_sum_parts_(grads, *grad_part_sum, first_part, Impl::Reference);
  std::vector<at::Tensor> ps(params), gs(grads), ms(exp_avgs), vs(exp_avg_sqs);
  if (lr.defined())
    at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, grad_scale, found_inf);
  else
    at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/{}, steps, lr_value, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, grad_scale, found_inf);
  square_sum_parts_(params, part_sum, first_part, Impl::Reference);
}

}  // namespace ampcheck::kernels
