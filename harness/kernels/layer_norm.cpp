// The residual add fused with LayerNorm (layer_norm.h): the ATen reference, the autograd function and the dispatch
// to layer_norm.cu.
#include "kernels/layer_norm.h"

#include "kernels/dispatch.h"

#include <ampcheck/amp/autocast.h>

#include <torch/csrc/autograd/custom_function.h>

namespace ampcheck::kernels {

using namespace detail;  // kernel_dtype_ok; with the CUDA kernels also aligned, kernel_dtype (dispatch.h)

namespace {
// with_bias_gradient (layer_norm.h)
struct BiasTapFn : public torch::autograd::Function<BiasTapFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& bias) {
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return y.view_as(y);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& dy = grads[0];
    at::Tensor db =
        dy.reshape({-1, dy.size(-1)}).sum(0).to(static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    return {dy, db};
  }
};

}  // namespace

at::Tensor with_bias_gradient(const at::Tensor& y, const at::Tensor& bias) {
  TORCH_CHECK(bias.dim() == 1 && y.dim() >= 1 && y.size(-1) == bias.size(0),
              "with_bias_gradient: bias must be (y.size(-1),)");
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
        gamma.contiguous().data_ptr<float>(), beta.contiguous().data_ptr<float>(),
        has_y ? s.data_ptr<float>() : nullptr, h.data_ptr(), kernel_dtype(out_dtype), mean.data_ptr<float>(),
        rstd.data_ptr<float>(), N, static_cast<int>(C), static_cast<float>(eps),
        at::cuda::getCurrentCUDAStream().stream());
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
        aligned(dh).data_ptr(), kernel_dtype(dh.scalar_type()),
        ds_in.defined() ? aligned(ds_in).data_ptr<float>() : nullptr, aligned(s).data_ptr<float>(),
        aligned(gamma.contiguous()).data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
        ds.data_ptr<float>(), y_needs_cast ? dy.data_ptr() : nullptr, kernel_dtype(y_dtype), part.data_ptr<float>(),
        dgb.data_ptr<float>(), bias, blocks, N, static_cast<int>(C), at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == nullptr, "add_layer_norm backward: ", err);
    at::Tensor dgamma = dgb.narrow(0, 0, C), dbeta = dgb.narrow(0, C, C);
    at::Tensor db = bias
                        ? dgb.narrow(0, 2 * C, C).to(static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt()))
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
      kernel_dtype_ok(out_dtype) && (!y.defined() || y.scalar_type() == at::kFloat || y.scalar_type() == out_dtype)) {
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

}  // namespace ampcheck::kernels
