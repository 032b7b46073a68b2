// A run's per-step record (trajectory.h): column names, a column as a series, the labelled runs of a reference.
#include "trajectory/trajectory.h"

#include <cmath>

namespace ampcheck::trajectory {

const char* column_name(int c) {
  static const char* names[kNumColumns] = {
      "loss",           "grad_norm",           "param_norm",          "update_norm", "loss_scale",   "skipped",
      "frac_zero_grad", "frac_subnormal_grad", "frac_nonfinite_grad", "lr",          "step_time_ms", "eval_loss"};
  return (c >= 0 && c < kNumColumns) ? names[c] : "?";
}

std::vector<double> Trajectory::column(int c) const {
  std::vector<double> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(r[c]);
  return out;
}

bool Trajectory::any_nonfinite_loss() const {
  for (const auto& r : rows)
    if (!std::isfinite(r[kLoss])) return true;
  return false;
}

int64_t Trajectory::skipped_steps() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r[kSkipped] > 0.5;  // NaN (not recorded) is no skip
  return n;
}

}  // namespace ampcheck::trajectory
