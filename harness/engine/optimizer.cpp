// Optimizer implementations.
#include "engine/optimizer.h"

#include "kernels/fused.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace ampcheck::engine {

Optimizer::Optimizer(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg)
    : params_(std::move(params)), decay_(std::move(decay)), cfg_(std::move(cfg)), lr_(cfg_.lr) {
  if (params_.size() != decay_.size())
    throw std::invalid_argument("optimizer: params and decay flags differ in length");
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

void Optimizer::rebind(std::vector<at::Tensor> params) {
  if (params.size() != params_.size())
    throw std::invalid_argument("optimizer: rebind with a different parameter count");
  params_ = std::move(params);
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<at::Tensor> params, std::vector<bool> decay,
                                          const OptimizerConfig& cfg) {
  if (cfg.kind == "adamw") return std::make_unique<AdamW>(std::move(params), std::move(decay), cfg);
  if (cfg.kind == "sgd") return std::make_unique<Sgd>(std::move(params), std::move(decay), cfg);
  throw std::invalid_argument("unknown optimizer '" + cfg.kind + "' (expected adamw or sgd)");
}

// ---------------------------------------------------------------------------------------------------------------
// AdamW
AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg)
    : Optimizer(std::move(params), std::move(decay), std::move(cfg)) {
  std::map<std::tuple<std::string, int, bool>, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto key = std::make_tuple(params_[i].device().str(), static_cast<int>(params_[i].scalar_type()), bool(decay_[i]));
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups_.size()).first;
      groups_.emplace_back();
    }
    groups_[it->second].push_back(i);
  }
}

void Optimizer::set_lr(double lr) {
  lr_ = lr;
  if (lr_tensor_.defined()) lr_tensor_.fill_(lr);  // a kernel on the device, no sync
}

void Optimizer::keep_lr_on_device(const at::Device& device) {
  lr_tensor_ = at::full({}, lr_, at::TensorOptions().dtype(at::kFloat).device(device));
}

void AdamW::lazy_init_state() {
  if (!exp_avg_.empty()) return;
  at::NoGradGuard no_grad;
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    // Python's fused AdamW: state["step"] = torch.zeros((), dtype=float32, device=p.device)
    steps_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
  }
}

bool AdamW::sums_squares() const {
  if (!cfg_.sum_param_squares || params_.empty()) return false;
  for (const auto& p : params_)
    if (p.scalar_type() != at::kFloat || !p.is_contiguous() || p.device() != params_.front().device()) return false;
  return true;
}

// Mirrors torch.optim.adamw._fused_adamw: step += 1; _fused_adamw_(...); step -= found_inf. With sum_param_squares
// the update is kernels::adamw_square_sums_ (the same values), which also leaves each parameter's partial sums of
// squares in part_sum_ (parameters without a gradient this step: by square_sum_parts_, unchanged).
void AdamW::fused_step(const c10::optional<at::Tensor>& grad_scale, const c10::optional<at::Tensor>& found_inf) {
  lazy_init_state();
  at::NoGradGuard no_grad;
  param_sq_ = grad_sq_ = at::Tensor();
  const bool sums = sums_squares();
  const bool grad_sums = sums && cfg_.sum_grad_squares && !grad_scale;
  if (sums && !part_sum_.defined()) {  // once (an eager step: a captured step reuses the buffer)
    int64_t P = 0;
    for (const auto& p : params_) {
      first_part_.push_back(P);
      P += kernels::square_sum_parts(p.numel());
    }
    part_sum_ = at::zeros({std::max<int64_t>(P, 1)}, params_.front().options());
  }
  if (grad_sums && !grad_part_sum_.defined()) grad_part_sum_ = at::zeros_like(part_sum_);
  std::vector<at::Tensor> no_grad_params;
  std::vector<int64_t> no_grad_parts;
  for (const auto& group : groups_) {
    std::vector<at::Tensor> ps, gs, m, v, st;
    std::vector<int64_t> parts;
    for (size_t i : group) {
      if (!params_[i].grad().defined()) {
        if (sums) no_grad_params.push_back(params_[i]), no_grad_parts.push_back(first_part_[i]);
        continue;
      }
      if (sums) parts.push_back(first_part_[i]);
      ps.push_back(params_[i]);
      gs.push_back(params_[i].grad());
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      st.push_back(steps_[i]);
    }
    if (ps.empty()) continue;
    const at::Device dev = ps.front().device();
    c10::optional<at::Tensor> dev_scale, dev_found;
    if (grad_scale) dev_scale = grad_scale->to(dev, /*non_blocking=*/true);
    if (found_inf) dev_found = found_inf->to(dev, /*non_blocking=*/true);
    at::_foreach_add_(st, 1);
    const double wd = decay_[group.front()] ? cfg_.weight_decay : 0.0;
    if (sums)
      kernels::adamw_square_sums_(ps, gs, m, v, st,
                                  lr_tensor_.defined() && lr_tensor_.device() == dev ? lr_tensor_ : at::Tensor(), lr_,
                                  cfg_.beta1, cfg_.beta2, wd, cfg_.eps, dev_scale, dev_found, part_sum_, parts,
                                  kernels::Impl::Auto, grad_sums ? &grad_part_sum_ : nullptr);
    else if (lr_tensor_.defined() && lr_tensor_.device() == dev)
      at::_fused_adamw_(ps, gs, m, v, /*max_exp_avg_sqs=*/{}, st, lr_tensor_, cfg_.beta1, cfg_.beta2, wd, cfg_.eps,
                        /*amsgrad=*/false, /*maximize=*/false, dev_scale, dev_found);
    else
      at::_fused_adamw_(ps, gs, m, v, /*max_exp_avg_sqs=*/{}, st, lr_, cfg_.beta1, cfg_.beta2, wd, cfg_.eps,
                        /*amsgrad=*/false, /*maximize=*/false, dev_scale, dev_found);
    if (dev_found) at::_foreach_sub_(st, std::vector<at::Tensor>(st.size(), *dev_found));
  }
  if (sums) {
    if (!no_grad_params.empty()) kernels::square_sum_parts_(no_grad_params, part_sum_, no_grad_parts);
    param_sq_ = kernels::square_sum_total(part_sum_);
  }
  if (grad_sums) {  // a parameter without a gradient adds nothing
    for (size_t k = 0; k < no_grad_params.size(); ++k)
      grad_part_sum_.narrow(0, no_grad_parts[k], kernels::square_sum_parts(no_grad_params[k].numel())).zero_();
    grad_sq_ = kernels::square_sum_total(grad_part_sum_);
  }
}

void AdamW::step() { fused_step(c10::nullopt, c10::nullopt); }

void AdamW::step_with_amp_scaling(const c10::optional<at::Tensor>& grad_scale, const at::Tensor& found_inf) {
  fused_step(grad_scale, found_inf);
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    out.emplace_back("exp_avg." + std::to_string(i), exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    out.emplace_back("step." + std::to_string(i), steps_[i]);
  }
  return out;
}

void AdamW::load_state(const NamedTensors& state) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  steps_.clear();
  param_sq_ = grad_sq_ = at::Tensor();  // the sums described the parameters before the load
  if (state.empty()) return;            // saved before the first step
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto get = [&](const std::string& key) {
      auto it = by_name.find(key + "." + std::to_string(i));
      if (it == by_name.end()) throw std::runtime_error("AdamW state: missing '" + key + "." + std::to_string(i) + "'");
      return it->second.to(params_[i].device());
    };
    exp_avg_.push_back(get("exp_avg"));
    exp_avg_sq_.push_back(get("exp_avg_sq"));
    steps_.push_back(get("step"));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// SGD with momentum (torch.optim.SGD, dampening 0, no nesterov): g += wd p; buf = momentum buf + g; p -= lr buf.
Sgd::Sgd(std::vector<at::Tensor> params, std::vector<bool> decay, OptimizerConfig cfg)
    : Optimizer(std::move(params), std::move(decay), std::move(cfg)) {}

void Sgd::step() {
  at::NoGradGuard no_grad;
  if (momentum_buffer_.empty()) momentum_buffer_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    if (decay_[i] && cfg_.weight_decay != 0) g = g.add(params_[i], cfg_.weight_decay);
    at::Tensor& buf = momentum_buffer_[i];
    if (cfg_.momentum != 0) {
      if (!buf.defined()) buf = g.clone();  // first step: buf = g (torch.optim.SGD)
      else
        buf.mul_(cfg_.momentum).add_(g);
      g = buf;
    }
    params_[i].add_(g, -lr_);
  }
}

NamedTensors Sgd::state() const {
  NamedTensors out;
  for (size_t i = 0; i < momentum_buffer_.size(); ++i)
    if (momentum_buffer_[i].defined()) out.emplace_back("momentum_buffer." + std::to_string(i), momentum_buffer_[i]);
  return out;
}

void Sgd::load_state(const NamedTensors& state) {
  momentum_buffer_.assign(params_.size(), at::Tensor());
  for (const auto& [name, t] : state) {
    const size_t i = std::stoul(name.substr(name.rfind('.') + 1));
    if (i >= params_.size()) throw std::runtime_error("SGD state: '" + name + "' indexes past the parameters");
    momentum_buffer_[i] = t.to(params_[i].device());
  }
}

// ---------------------------------------------------------------------------------------------------------------
double scheduled_lr(const ScheduleConfig& s, double peak_lr, int64_t step, int64_t total_steps) {
  if (s.kind == "constant") return peak_lr;
  if (step < s.warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double min_lr = s.min_lr_ratio * peak_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - s.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (peak_lr - min_lr);
}

at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> defined;
  for (const auto& g : grads)
    if (g.defined()) defined.push_back(g);
  if (defined.empty()) return at::zeros({});
  // As torch.nn.utils.clip_grad_norm_(foreach=True): norms per tensor in the grads' dtype (fp16 grads give an fp16
  // total, which overflows to inf for scaled grads — the "clip before unscale_" pitfall), coefficient clamped at 1.
  std::vector<at::Tensor> norms = at::_foreach_norm(defined, 2);
  at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  std::map<std::string, std::vector<at::Tensor>> by_device_dtype;
  for (auto& g : defined) by_device_dtype[g.device().str() + c10::toString(g.scalar_type())].push_back(g);
  for (auto& [key, gs] : by_device_dtype) at::_foreach_mul_(gs, coef.to(gs.front().device(), gs.front().scalar_type()));
  return total;
}

}  // namespace ampcheck::engine
