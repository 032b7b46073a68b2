// Linear + bias (+ GELU) with the bias gradient from one column-sum pass (bias_gelu.h): the ATen reference, the
// autograd function and the dispatch to column_sums.cu.
#include "kernels/bias_gelu.h"

#include "kernels/dispatch.h"

#include <ampcheck/amp/autocast.h>

#include <torch/csrc/autograd/custom_function.h>

namespace ampcheck::kernels {

using namespace detail;  // kernel_dtype_ok; with the CUDA kernels also aligned, kernel_dtype (dispatch.h)

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
    return {dx,           dw,           ctx->needs_input_grad(2) ? db.to(cast("b_dtype")) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu, Impl impl) {
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 2 && b.dim() == 1 && x.size(-1) == w.size(1) && b.size(0) == w.size(0),
              "linear_bias_gelu: expected x (..., K), w (N, K), b (N)");
  const at::ScalarType dt = amp::autocast_dtype_or(x.device().type(), x.scalar_type());  // at::linear's dtype
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);         // the function casts itself
  return LinearBiasGeluFn::apply(x, w, b, gelu, static_cast<int64_t>(dt), static_cast<int64_t>(impl));
}

}  // namespace ampcheck::kernels
