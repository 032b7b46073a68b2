// StepProbes (step_probes.h).
#include "engine/step_probes.h"

#include "trajectory/trajectory.h"
#include "kernels/fused.h"

#include <ATen/core/grad_mode.h>

#include <limits>
#include <map>

namespace ampcheck::engine {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double smallest_normal(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return 6.103515625e-05;  // 2^-14
    case at::kBFloat16:
      return 1.1754943508222875e-38;  // 2^-126, as fp32
    case at::kDouble:
      return 2.2250738585072014e-308;
    default:
      return 1.1754943508222875e-38;  // fp32
  }
}

double largest_finite(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return 65504.0;
    case at::kBFloat16:
      return 3.3895313892515355e+38;
    case at::kDouble:
      return 1.7976931348623157e+308;
    default:
      return 3.4028234663852886e+38;  // fp32
  }
}

// engine option train.fused_grad_check: the norm from one pass that also says whether any element is inf or NaN
std::pair<at::Tensor, at::Tensor> norm_and_found(const std::vector<at::Tensor>& ts, const at::Device& device) {
  if (ts.empty()) {
    at::Tensor zero = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    return {zero, zero.clone()};
  }
  auto [sum_sq, found] = kernels::square_sum_nonfinite(ts);
  return {sum_sq.sqrt(), found};
}
}  // namespace

at::Tensor total_norm(const std::vector<at::Tensor>& ts, const at::Device& device) {
  if (ts.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  // per-tensor norms accumulated in fp32 whatever the tensor dtype (fp16 norms of scaled grads would overflow)
  std::vector<at::Tensor> norms = at::_foreach_norm(ts, 2, at::kFloat);
  return at::linalg_vector_norm(at::stack(norms), 2);
}

StepProbes::StepProbes(const EnginePlan& plan, const at::Device& device)
    : fused_grad_check_(plan.fused_grad_check),
      param_norm_from_optimizer_(plan.param_norm_from_optimizer),
      grad_norm_from_optimizer_(plan.grad_norm_from_optimizer),
      device_(device) {}

at::Tensor StepProbes::before_step(const std::vector<at::Tensor>& grads, const at::Tensor& scale, bool full_probe,
                                   const std::vector<at::Tensor>& stepped) {
  full_probe_ = full_probe;
  scale_ = scale;  // the scale these grads carry (a tensor the step does not change afterwards: the caller's copy)
  grad_norm_ = at::Tensor();
  at::Tensor found;
  if (grad_norm_from_optimizer_) {
    // AdamW's pass reads these very grads (no scaler, no clipping): the norm after the step (row)
  } else if (fused_grad_check_) {
    auto [norm, nonfinite] = norm_and_found(grads, device_);
    grad_norm_ = norm / scale_;
    found = nonfinite;
  } else {
    grad_norm_ = total_norm(grads, device_) / scale_;
  }
  stats_.clear();
  if (full_probe) {
    stats_ = grad_stats(grads);
    at::NoGradGuard no_grad;
    if (prev_params_.empty()) {
      for (const auto& p : stepped) prev_params_.push_back(p.detach().clone());
    } else {
      at::_foreach_copy_(prev_params_, stepped);
    }
  }
  return found;
}

at::Tensor StepProbes::row(const at::Tensor& loss, const at::Tensor& skipped, const Optimizer* first,
                           const std::vector<at::Tensor>& stepped) {
  const auto dev_opts = at::TensorOptions().dtype(at::kFloat).device(device_);
  if (grad_norm_from_optimizer_) {  // (the grads as they were: nothing unscales them without a scaler)
    const at::Tensor gsq = first ? first->grad_square_sum() : at::Tensor();
    TORCH_INTERNAL_ASSERT(gsq.defined(), "train.fused_param_norm: AdamW's step left no gradient sum");
    grad_norm_ = gsq.sqrt() / scale_;
  }
  at::Tensor param_norm, update_norm;
  const at::Tensor nan = full_probe_ ? at::Tensor() : at::full({}, kNaN, dev_opts);  // the columns not probed
  {
    at::NoGradGuard no_grad;
    const at::Tensor sq = param_norm_from_optimizer_ && first ? first->param_square_sum() : at::Tensor();
    // train.fused_param_norm: AdamW's pass (bit for bit norm_and_found's); undefined where no step has summed these
    // parameters yet (a first step the GradScaler skipped on the host; the first after a checkpoint load): the pass
    if (sq.defined()) param_norm = sq.sqrt();
    else
      param_norm = fused_grad_check_ ? norm_and_found(stepped, device_).first : total_norm(stepped, device_);
    update_norm = full_probe_ ? total_norm(at::_foreach_sub(stepped, prev_params_), device_) : nan;
  }

  // the row in fp64: loss and norms as computed, the scale, the skip flag and the statistics rounded to fp32 first (as
  // the row always held them). Where every column is fp32 (always, so far) one stack and one exact widening — a few
  // kernels rather than a conversion per column.
  std::vector<at::Tensor> row = {loss, grad_norm_, param_norm, update_norm, scale_, skipped};
  for (const auto& s : stats_) row.push_back(s);
  while (static_cast<int>(row.size()) < trajectory::kNumDeviceColumns) row.push_back(nan);
  bool all_fp32 = true;
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = (static_cast<int>(i) < trajectory::kLossScale ? row[i] : row[i].to(at::kFloat)).reshape({});
    all_fp32 = all_fp32 && row[i].scalar_type() == at::kFloat;
  }
  if (all_fp32) return at::stack(row).to(at::kDouble);
  for (auto& t : row) t = t.to(at::kDouble);
  return at::stack(row);
}

std::vector<at::Tensor> StepProbes::grad_stats(const std::vector<at::Tensor>& grads) const {
  auto opts = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor zero = at::zeros({}, opts), sub = at::zeros({}, opts), nonfinite = at::zeros({}, opts);
  int64_t numel = 0;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& g : grads) {
    by_dtype[g.scalar_type()].push_back(g.reshape({-1}));
    numel += g.numel();
  }
  for (auto& [dtype, flats] : by_dtype) {
    // one |g| tensor, three compare-and-count passes: NaN fails every comparison and inf exceeds the max, so
    // non-finite = n - count(|g| <= max). Few kernel launches whatever the number of parameters.
    at::Tensor mag = (flats.size() == 1 ? flats[0] : at::cat(flats)).abs();
    at::Tensor n_zero = (mag == 0).sum();
    zero += n_zero;
    sub += (mag < smallest_normal(dtype)).sum() - n_zero;
    nonfinite += static_cast<double>(mag.numel()) - (mag <= largest_finite(dtype)).sum();
  }
  const double n = std::max<int64_t>(numel, 1);
  return {zero / n, sub / n, nonfinite / n};
}

}  // namespace ampcheck::engine
