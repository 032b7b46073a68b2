// GEMM epilogues: the ATen side of gemm_lt.cu (gemm_epilogues.h). Row-major ATen matrices are handed to cuBLASLt
// as their column-major transposes: a contiguous (R, C) tensor is a C × R column-major matrix with leading dimension C.
#include "kernels/gemm_epilogues.h"

#include "kernels/bias_gelu.h"
#include "kernels/casts.h"

#include <ampcheck/amp/autocast.h>

#include <torch/csrc/autograd/custom_function.h>

#if defined(AMPCHECK_CUDA_KERNELS) && defined(AMPCHECK_CUBLASLT)
#define AMPCHECK_GEMM_LT 1
#include "kernels/kernels_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#endif

namespace ampcheck::kernels {

bool gemm_epilogues_built() {
#ifdef AMPCHECK_GEMM_LT
  return true;
#else
  return false;
#endif
}

namespace {
at::ScalarType compute_dtype(const at::Tensor& x) { return amp::autocast_dtype_or(x.device().type(), x.scalar_type()); }

bool lt_takes(const at::Tensor& x, const at::Tensor& w) {
  const at::ScalarType dt = compute_dtype(x);
  return gemm_epilogues_built() && x.is_cuda() && w.is_cuda() && w.dim() == 2 && x.dim() >= 1 &&
         x.size(-1) == w.size(1) && (dt == at::kBFloat16 || dt == at::kHalf) && w.size(0) % 8 == 0 &&
         w.size(1) % 8 == 0 && x.numel() > 0;
}

// the dtype a weight / bias gradient leaves the GEMM in: fp32 where the compute dtype has fp32's range (bf16) and the
// parameter is fp32, else the compute dtype (fp16 keeps the stock rounding: an overflow stays inf)
at::ScalarType wgrad_dtype(at::ScalarType dt, at::ScalarType param) {
  return dt == at::kBFloat16 && param == at::kFloat ? at::kFloat : dt;
}

#ifdef AMPCHECK_GEMM_LT
cuda::DType lt_dtype(at::ScalarType t) {
  return t == at::kFloat ? cuda::DType::Float32 : t == at::kHalf ? cuda::DType::Float16 : cuda::DType::BFloat16;
}

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // cuBLASLt's recommendation for Hopper

void run(cuda::LtGemm g, const at::Tensor& like, const char* what) {
  at::Tensor ws = at::empty({kWorkspaceBytes}, like.options().dtype(at::kByte));
  // the fastest algorithm measured on the problem, unless deterministic algorithms are asked for (a measured choice
  // may differ from run to run; the heuristic's does not)
  g.autotune = !at::globalContext().deterministicAlgorithms();
  const char* err =
      cuda::gemm_lt(g, ws.data_ptr(), static_cast<size_t>(kWorkspaceBytes), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == nullptr, "gemm_epilogues (", what, "): ", err);
}

// dw (out, in) = gᵀ x, or dw += gᵀ x with accumulate, in one cuBLASLt GEMM: x (R, in), g (R, out) contiguous in one
// dtype, dw contiguous in fp32 or that dtype
void wgrad_into(at::Tensor& dw, const at::Tensor& x, const at::Tensor& g, bool accumulate) {
  cuda::LtGemm m;
  // column-major: dwᵀ (in × out) = xᵀ (in × R) · g (R × out); g is stored as gᵀ (out × R), hence trans_b
  m.m = x.size(1), m.n = g.size(1), m.k = x.size(0);
  m.a = x.data_ptr(), m.lda = x.size(1), m.trans_a = false;
  m.b = g.data_ptr(), m.ldb = g.size(1), m.trans_b = true;
  m.ab_type = lt_dtype(x.scalar_type());
  m.d = dw.data_ptr(), m.ldd = x.size(1), m.d_type = lt_dtype(dw.scalar_type());
  m.accumulate = accumulate;
  run(m, x, "weight gradient");
}

at::Tensor wgrad(const at::Tensor& x, const at::Tensor& g, at::ScalarType out_dtype) {
  at::Tensor dw = at::empty({g.size(1), x.size(1)}, x.options().dtype(out_dtype));
  wgrad_into(dw, x, g, /*accumulate=*/false);
  return dw;
}

// (g · w) ⊙ GELU'(pre) in one GEMM (DGELU epilogue, applied to the fp32 product): g (N, C2), w (C2, H), pre (N, H);
// in g's dtype
at::Tensor dgelu(const at::Tensor& g, const at::Tensor& w, const at::Tensor& pre) {
  const int64_t N = g.size(0), C2 = g.size(1), H = w.size(1);
  at::Tensor d = at::empty({N, H}, g.options());
  cuda::LtGemm m;
  // column-major: dᵀ (H × N) = wᵀ (H × C2, stored so: w row-major) · gᵀ (C2 × N)
  m.m = H, m.n = N, m.k = C2;
  m.a = w.data_ptr(), m.lda = H, m.trans_a = false;
  m.b = g.data_ptr(), m.ldb = C2, m.trans_b = false;
  m.ab_type = m.d_type = lt_dtype(g.scalar_type());
  m.d = d.data_ptr(), m.ldd = H;
  m.epilogue = cuda::LtEpilogue::DGelu, m.aux = pre.data_ptr(), m.ld_aux = H;
  run(m, g, "GELU backward");
  return d;
}

// a weight or bias in the compute dtype: the step's cast (model.gemm_epilogues' one-pass casts, Gpt) where given,
// else cast here; the same values either way (round to nearest even)
at::Tensor cast_or(const std::optional<at::Tensor>& cast, const at::Tensor& t, at::ScalarType dt) {
  if (cast && cast->defined()) {
    TORCH_CHECK(cast->scalar_type() == dt && cast->sizes() == t.sizes(),
                "gemm_epilogues: a precast tensor of another dtype or shape");
    return cast->contiguous();
  }
  return t.to(dt).contiguous();
}

// a precast handed in, where it is in the compute dtype (else the function casts itself)
std::optional<at::Tensor> precast(const at::Tensor& t, at::ScalarType dt) {
  if (t.defined() && t.scalar_type() == dt) return t;
  return std::nullopt;
}

// a weight gradient in its parameter's dtype: fp16 / bf16 → fp32 by one vectorised pass (kernels::widen_sum of one
// part: exact), as .to() would give
at::Tensor widen_to(const at::Tensor& g, at::ScalarType dtype) {
  if (dtype == at::kFloat && (g.scalar_type() == at::kHalf || g.scalar_type() == at::kBFloat16)) return widen_sum({g});
  return g.to(dtype);
}

std::vector<int64_t> with_last(at::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> s = sizes.vec();
  s.back() = last;
  return s;
}

struct LinearEpiloguesFn : public torch::autograd::Function<LinearEpiloguesFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, const std::optional<at::Tensor>& w_cast,
                            const std::optional<at::Tensor>& b_cast, int64_t dtype_i) {
    const auto dt = static_cast<at::ScalarType>(dtype_i);
    at::Tensor x2 = x.reshape({-1, x.size(-1)}).to(dt).contiguous(), wc = cast_or(w_cast, w, dt);
    at::Tensor out =
        at::addmm(cast_or(b_cast, b, dt), x2, wc.t());  // what at::linear runs for a (…, K) input with a bias
    ctx->save_for_backward({x2, wc});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
    return out.view(with_last(x.sizes(), w.size(0)));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &wc = saved[1];
    const auto type = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    at::Tensor g = grads[0].reshape({-1, wc.size(0)}).to(wc.scalar_type()).contiguous();
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = at::mm(g, wc).view(ctx->saved_data["x_sizes"].toIntVector()).to(type("x_dtype"));
    if (ctx->needs_input_grad(1))
      dw = widen_to(wgrad(x2, g, wgrad_dtype(wc.scalar_type(), type("w_dtype"))), type("w_dtype"));
    // the bias gradient: kernels::bias_grad's column sums (fp32, rounded through the compute dtype as the stock sum)
    if (ctx->needs_input_grad(2)) db = bias_grad(g, at::Tensor()).first.to(type("b_dtype"));
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct MlpEpiloguesFn : public torch::autograd::Function<MlpEpiloguesFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_fc,
                            const at::Tensor& b_fc, const at::Tensor& w_proj, const at::Tensor& b_proj,
                            const std::optional<at::Tensor>& w_fc_cast, const std::optional<at::Tensor>& b_fc_cast,
                            const std::optional<at::Tensor>& w_proj_cast, const std::optional<at::Tensor>& b_proj_cast,
                            int64_t dtype_i) {
    const auto dt = static_cast<at::ScalarType>(dtype_i);
    at::Tensor x2 = x.reshape({-1, x.size(-1)}).to(dt).contiguous();
    at::Tensor wfc = cast_or(w_fc_cast, w_fc, dt), wpr = cast_or(w_proj_cast, w_proj, dt);
    // forward: the stock ops (cuBLASLt's GELU_AUX_BIAS epilogue was measured slower than addmm + gelu here)
    at::Tensor pre = at::addmm(cast_or(b_fc_cast, b_fc, dt), x2, wfc.t());
    at::Tensor act = at::gelu(pre, "tanh");
    at::Tensor out = at::addmm(cast_or(b_proj_cast, b_proj, dt), act, wpr.t());
    ctx->save_for_backward({x2, wfc, wpr, pre, act});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    for (const auto& [key, t] : {std::pair{"x_dtype", &x},
                                 {"w_fc_dtype", &w_fc},
                                 {"b_fc_dtype", &b_fc},
                                 {"w_proj_dtype", &w_proj},
                                 {"b_proj_dtype", &b_proj}})
      ctx->saved_data[key] = static_cast<int64_t>(t->scalar_type());
    return out.view(with_last(x.sizes(), w_proj.size(0)));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &wfc = saved[1], &wpr = saved[2], &pre = saved[3], &act = saved[4];
    const auto type = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    const at::ScalarType dt = wfc.scalar_type();
    at::Tensor g = grads[0].reshape({-1, wpr.size(0)}).to(dt).contiguous();
    at::Tensor dw_proj = wgrad(act, g, wgrad_dtype(dt, type("w_proj_dtype")));
    // (c_proj's bias gradient not summed here where it is taken elsewhere: add_layer_norm's y_bias, a detached bias)
    at::Tensor db_proj = ctx->needs_input_grad(4) ? bias_grad(g, at::Tensor()).first : at::Tensor();
    at::Tensor d_pre = dgelu(g, wpr, pre);
    at::Tensor db_fc = bias_grad(d_pre, at::Tensor()).first;
    at::Tensor dw_fc = wgrad(x2, d_pre, wgrad_dtype(dt, type("w_fc_dtype")));
    at::Tensor dx = at::mm(d_pre, wfc).view(ctx->saved_data["x_sizes"].toIntVector()).to(type("x_dtype"));
    return {dx,
            widen_to(dw_fc, type("w_fc_dtype")),
            db_fc.to(type("b_fc_dtype")),
            widen_to(dw_proj, type("w_proj_dtype")),
            db_proj.defined() ? db_proj.to(type("b_proj_dtype")) : at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};
#endif
}  // namespace

bool gemm_epilogues_apply(const at::Tensor& x, const at::Tensor& w) { return lt_takes(x, w); }

at::Tensor linear_epilogues(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Impl impl,
                            const at::Tensor& w_cast, const at::Tensor& b_cast) {
  TORCH_CHECK(w.dim() == 2 && b.dim() == 1 && x.size(-1) == w.size(1) && b.size(0) == w.size(0),
              "linear_epilogues: expected x (..., K), w (N, K), b (N)");
#ifdef AMPCHECK_GEMM_LT
  if (impl == Impl::Auto && lt_takes(x, w)) {
    const at::ScalarType dt = compute_dtype(x);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // the function casts itself
    return LinearEpiloguesFn::apply(x, w, b, precast(w_cast, dt), precast(b_cast, dt), static_cast<int64_t>(dt));
  }
#endif
  (void)impl, (void)w_cast, (void)b_cast;
  return at::linear(x, w, b);
}

at::Tensor mlp_gelu_epilogues(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                              const at::Tensor& w_proj, const at::Tensor& b_proj, Impl impl,
                              const std::vector<at::Tensor>& casts) {
  TORCH_CHECK(w_fc.dim() == 2 && w_proj.dim() == 2 && x.size(-1) == w_fc.size(1) && w_proj.size(1) == w_fc.size(0) &&
                  b_fc.dim() == 1 && b_fc.size(0) == w_fc.size(0) && b_proj.dim() == 1 &&
                  b_proj.size(0) == w_proj.size(0),
              "mlp_gelu_epilogues: expected x (..., K), w_fc (H, K), b_fc (H), w_proj (N, H), b_proj (N)");
#ifdef AMPCHECK_GEMM_LT
  if (impl == Impl::Auto && lt_takes(x, w_fc) && w_proj.size(0) % 8 == 0) {
    const at::ScalarType dt = compute_dtype(x);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    TORCH_CHECK(casts.empty() || casts.size() == 4, "mlp_gelu_epilogues: casts of w_fc, b_fc, w_proj, b_proj or none");
    const auto c = [&](size_t i) { return casts.empty() ? std::optional<at::Tensor>() : precast(casts[i], dt); };
    return MlpEpiloguesFn::apply(x, w_fc, b_fc, w_proj, b_proj, c(0), c(1), c(2), c(3), static_cast<int64_t>(dt));
  }
#endif
  (void)impl, (void)casts;
  return at::linear(at::gelu(at::linear(x, w_fc, b_fc), "tanh"), w_proj, b_proj);
}

void wgrad_fp32_(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x, bool accumulate, Impl impl) {
  TORCH_CHECK(dw.scalar_type() == at::kFloat && dw.is_contiguous() && dw.dim() == 2,
              "wgrad_fp32_: dw must be (V, C) fp32 contiguous");
  TORCH_CHECK(g.dim() == 2 && x.dim() == 2 && g.size(0) == x.size(0) && g.size(1) == dw.size(0) &&
                  x.size(1) == dw.size(1) && g.scalar_type() == x.scalar_type(),
              "wgrad_fp32_: expected g (n, V), x (n, C) of one dtype and dw (V, C)");
#ifdef AMPCHECK_GEMM_LT
  const auto dt = g.scalar_type();
  if (impl == Impl::Auto && g.is_cuda() && (dt == at::kBFloat16 || dt == at::kHalf) && dw.size(0) % 8 == 0 &&
      dw.size(1) % 8 == 0) {
    wgrad_into(dw, x.contiguous(), g.contiguous(), accumulate);
    return;
  }
#endif
  (void)impl;
  at::NoGradGuard no_grad;
  at::Tensor prod = at::mm(g.t().to(at::kFloat), x.to(at::kFloat));
  if (accumulate) dw.add_(prod);
  else
    dw.copy_(prod);
}

}  // namespace ampcheck::kernels
