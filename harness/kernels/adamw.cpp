// AdamW's fused step with the parameters' sums of squares (adamw.h): the ATen reference and the dispatch to adamw.cu.
#include "kernels/adamw.h"

#include "kernels/dispatch.h"
#include "kernels/square_sums.h"

namespace ampcheck::kernels {

using detail::check_parts;

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
      TORCH_CHECK(
          x->sizes() == params[t].sizes() && x->scalar_type() == at::kFloat && x->is_contiguous() &&
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
