// FP8 matmuls: quantisation with per-tensor scales, the FP8 Linear as an autograd function, probes.
#include "engine/fp8.h"

#include <torch/csrc/autograd/custom_function.h>

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <stdexcept>

namespace ampcheck::engine {

Fp8Format fp8_format(at::ScalarType dtype) {
  if (dtype == at::kFloat8_e4m3fn) return {dtype, 448.0, 464.0, std::ldexp(1.0, -9), "e4m3"};     // ulp 32 at 448
  if (dtype == at::kFloat8_e5m2) return {dtype, 57344.0, 61440.0, std::ldexp(1.0, -16), "e5m2"};  // ulp 8192
  throw std::invalid_argument(std::string("fp8_format: not an FP8 dtype: ") + c10::toString(dtype));
}

namespace {
bool is_fp8_site(const std::string& layers, const std::string& site) {
  if (site.rfind("h.", 0) == 0) return true;
  if (site == "lm_head") return layers == "blocks+head" || layers == "all";
  return layers == "all";  // wte, wpe lookups
}
bool is_lookup(const std::string& site) { return site == "wte" || site == "wpe"; }

// Autocast must not touch what the FP8 path computes (it would cast the amax reduction's input to fp32, or the
// matmul's): its dispatch keys are excluded inside forward and backward.
struct NoAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::autocast_dispatch_keyset};
};

// x (M, K) @ w (N, K)^T in FP8. Non-tensor arguments: the Fp8Matmuls object and the site.
struct Fp8LinearFn : public torch::autograd::Function<Fp8LinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            Fp8Matmuls* self, int64_t site) {
    NoAutocast no_autocast;
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    TORCH_CHECK(M % 16 == 0 && K % 16 == 0 && N % 16 == 0,
                "fp8: at::_scaled_mm needs every dimension to be a multiple "
                "of 16; site ",
                site, " has M=", M, " K=", K, " N=", N);
    auto qx = self->quantize(self->cast_index(static_cast<int>(site), Fp8Matmuls::kInput), x);
    auto qw = self->quantize(self->cast_index(static_cast<int>(site), Fp8Matmuls::kWeight), w);
    // mat2 must be column-major: w8 (N, K) row-major, transposed as a view
    at::Tensor y = at::_scaled_mm(qx.data, qw.data.t(), qx.inv_scale, qw.inv_scale, {}, {}, at::kBFloat16,
                                  /*use_fast_accum=*/true);
    ctx->save_for_backward({qx.data, qx.inv_scale, qw.data, qw.inv_scale});
    ctx->saved_data["self"] = reinterpret_cast<int64_t>(self);
    ctx->saved_data["site"] = site;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    NoAutocast no_autocast;
    auto* self = reinterpret_cast<Fp8Matmuls*>(ctx->saved_data["self"].toInt());
    const int site = static_cast<int>(ctx->saved_data["site"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x8 = saved[0], &x_inv = saved[1], &w8 = saved[2], &w_inv = saved[3];
    auto qg = self->quantize(self->cast_index(site, Fp8Matmuls::kGrad), grads[0].contiguous());
    // dgrad (M, K) = grad8 (M, N) @ w8 (N, K): w8 as a column-major (N, K)
    at::Tensor dx = at::_scaled_mm(qg.data, w8.t().contiguous().t(), qg.inv_scale, w_inv, {}, {}, at::kBFloat16, false);
    // wgrad (N, K) = grad8^T (N, M) row-major @ x8 (M, K) column-major
    at::Tensor dw = at::_scaled_mm(qg.data.t().contiguous(), x8.t().contiguous().t(), qg.inv_scale, x_inv, {}, {},
                                   at::kBFloat16, false);
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {dx.to(x_dtype), dw.to(w_dtype), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

Fp8Matmuls::Fp8Matmuls(const Fp8Config& cfg, const std::vector<std::string>& sites, const at::Device& device)
    : cfg_(cfg), device_(device) {
  if (cfg_.layers != "blocks" && cfg_.layers != "blocks+head" && cfg_.layers != "all")
    throw std::invalid_argument("fp8.layers: '" + cfg_.layers + "' (expected blocks, blocks+head or all)");
  if (cfg_.scaling == Fp8Scaling::Delayed && cfg_.history < 1) throw std::invalid_argument("fp8.history: must be >= 1");
  const auto fopts = at::TensorOptions().dtype(at::kFloat).device(device_);
  auto add = [&](const std::string& name, at::ScalarType dt) {
    Cast c{fp8_format(dt), {}, 0};
    if (cfg_.scaling == Fp8Scaling::Delayed) c.history = at::zeros({cfg_.history}, fopts);
    casts_.push_back(std::move(c));
    cast_names_.push_back(name);
  };
  for (const auto& s : sites) {
    if (!is_fp8_site(cfg_.layers, s)) {
      site_cast_.push_back(-1);
      continue;
    }
    site_cast_.push_back(static_cast<int>(casts_.size()));
    if (is_lookup(s)) {
      add(s + ".w", at::kFloat8_e4m3fn);
      continue;
    }
    add(s + ".x", at::kFloat8_e4m3fn);
    add(s + ".w", at::kFloat8_e4m3fn);
    add(s + ".grad", cfg_.hybrid ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn);
  }
  if (casts_.empty()) throw std::invalid_argument("fp8: the model has no matmul site to run in FP8");
  step_row_ = at::zeros({static_cast<int64_t>(casts_.size()), 3}, fopts);
}

Fp8Matmuls::Quantized Fp8Matmuls::quantize(int index, const at::Tensor& x) {
  Cast& c = casts_.at(static_cast<size_t>(index));
  const Fp8Format& f = c.format;
  const auto fopts = at::TensorOptions().dtype(at::kFloat).device(x.device());
  at::Tensor scale, scaled, q;
  if (cfg_.scaling == Fp8Scaling::None) {  // PITFALL: x.to(float8) — no scale, no saturation (e4m3: NaN past 448)
    scale = at::ones({}, fopts);
    q = x.to(f.dtype);
    if (probe_) scaled = x.to(at::kFloat);  // only the probes read it
  } else {
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor amax = at::linalg_vector_norm(xf, INFINITY);  // one reduction, no |x| tensor
    at::Tensor basis = amax;
    if (cfg_.scaling == Fp8Scaling::Delayed) {
      if (c.filled > 0) basis = c.filled >= cfg_.history ? c.history.max() : c.history.narrow(0, 0, c.filled).max();
      c.history.select(0, c.filled % cfg_.history).copy_(amax);  // this cast's amax feeds the next casts' scale
      ++c.filled;
    }
    // scale = max / basis / 2^margin; a zero (or non-finite) basis keeps scale 1
    scale = at::where(basis > 0, f.max / basis, at::ones({}, fopts));
    scale = at::where(at::isfinite(scale), scale, at::ones({}, fopts));
    if (cfg_.margin != 0) scale = scale * std::ldexp(1.0, static_cast<int>(-cfg_.margin));
    scaled = xf * scale;
    q = at::clamp(scaled, -f.max, f.max).to(f.dtype);  // saturating cast, as Transformer Engine's
  }
  at::Tensor slot = step_row_.select(0, index);
  if (probe_) {
    at::Tensor mag = scaled.abs();
    const double n = static_cast<double>(std::max<int64_t>(1, x.numel()));
    // saturated: beyond what rounds to the format's max — clipped by the saturating cast, NaN / inf from a plain one
    // (a NaN input counts too: it failed the cast as well). Elements that round to the max are representable: with
    // the current amax the tensor's largest elements land there by design. flushed: non-zero, rounds to 0.
    at::Tensor sat = (static_cast<double>(x.numel()) - (mag < f.overflow).sum()).to(at::kFloat) / n;
    at::Tensor flushed = ((mag <= f.smallest_subnormal / 2).sum() - (mag == 0).sum()).to(at::kFloat) / n;
    at::Tensor row = at::stack({sat, flushed, scale.to(at::kFloat)});
    slot.copy_(at::maximum(slot, row));  // several casts of a tensor in a step (micro-batches): the worst
  } else {
    slot.select(0, 2).copy_(scale);
  }
  return {q, scale.reciprocal()};
}

at::Tensor Fp8Matmuls::linear(int site, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (site < 0 || static_cast<size_t>(site) >= site_cast_.size() || site_cast_[site] < 0) return {};
  const int64_t K = x.size(-1);
  at::Tensor x2 = x.reshape({-1, K}).contiguous();
  at::Tensor y = Fp8LinearFn::apply(x2, w, this, static_cast<int64_t>(site));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  y = y.view(shape);
  if (b.defined()) y = y + b.to(y.scalar_type());  // bias in bf16, as autocast's linear
  return y;
}

at::Tensor Fp8Matmuls::embedding(int site, const at::Tensor& w, const at::Tensor& indices) {
  if (site < 0 || static_cast<size_t>(site) >= site_cast_.size() || site_cast_[site] < 0) return {};
  at::Tensor dequantized;
  {
    at::NoGradGuard no_grad;
    NoAutocast no_autocast;
    auto q = quantize(site_cast_[site], w.detach());
    dequantized = q.data.to(at::kFloat) * q.inv_scale;
  }
  // the lookup reads the FP8 round trip of the table; its gradient reaches the fp32 table unchanged
  at::Tensor table = w + (dequantized.to(w.scalar_type()) - w.detach());
  return at::embedding(table, indices);
}

std::vector<std::pair<std::string, at::Tensor>> Fp8Matmuls::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (cfg_.scaling != Fp8Scaling::Delayed) return out;
  std::vector<int64_t> filled;
  for (size_t i = 0; i < casts_.size(); ++i) {
    out.emplace_back("fp8/history/" + cast_names_[i], casts_[i].history.detach());
    filled.push_back(casts_[i].filled);
  }
  out.emplace_back("fp8/filled", at::tensor(filled, at::kLong));
  return out;
}

void Fp8Matmuls::load_state(const std::map<std::string, at::Tensor>& tensors, const std::string& path) {
  if (cfg_.scaling != Fp8Scaling::Delayed) return;
  auto it = tensors.find("fp8/filled");
  if (it == tensors.end())
    throw std::runtime_error(path +
                             ": checkpoint has no FP8 amax histories (tensor 'fp8/filled'); this run uses "
                             "delayed scaling. HINT: resume with the scenario that saved it");
  const at::Tensor filled = it->second.to(at::kLong);
  if (filled.numel() != static_cast<int64_t>(casts_.size()))
    throw std::runtime_error(path + ": tensor 'fp8/filled' has " + std::to_string(filled.numel()) +
                             " casts, the run has " + std::to_string(casts_.size()));
  for (size_t i = 0; i < casts_.size(); ++i) {
    auto h = tensors.find("fp8/history/" + cast_names_[i]);
    if (h == tensors.end() || h->second.sizes() != casts_[i].history.sizes())
      throw std::runtime_error(path + ": tensor 'fp8/history/" + cast_names_[i] + "' is missing or not (" +
                               std::to_string(cfg_.history) + ",) fp32. HINT: resume with the scenario that saved it");
    casts_[i].history.copy_(h->second);
    casts_[i].filled = filled[static_cast<int64_t>(i)].item<int64_t>();
  }
}

void Fp8Matmuls::begin_step(bool probe) {
  probe_ = probe;
  step_row_.zero_();
}

void Fp8Matmuls::end_step() {
  at::Tensor row = step_row_.clone();
  if (!probe_) row.narrow(1, 0, 2).fill_(NAN);
  pending_.push_back(row);
}

void Fp8Matmuls::discard() { pending_.clear(); }

void Fp8Matmuls::flush_into(trajectory::Fp8Probes& out) {
  if (out.casts.empty()) out.casts = cast_names_;
  if (pending_.empty()) return;
  at::Tensor rows = at::stack(pending_).to(at::kCPU).to(at::kDouble);  // SYNC POINT (with the trainer's flush)
  pending_.clear();
  auto acc = rows.accessor<double, 3>();
  for (int64_t s = 0; s < rows.size(0); ++s) {
    std::vector<double> sat(rows.size(1)), fl(rows.size(1)), sc(rows.size(1));
    for (int64_t c = 0; c < rows.size(1); ++c) sat[c] = acc[s][c][0], fl[c] = acc[s][c][1], sc[c] = acc[s][c][2];
    out.saturated.push_back(std::move(sat));
    out.flushed.push_back(std::move(fl));
    out.scale.push_back(std::move(sc));
  }
}

}  // namespace ampcheck::engine
