// Verdict computation.
#include "verdict/verdict.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ampcheck::verdict {

Tolerance default_tolerance(const engine::Strategy& s) {
  Tolerance t;
  const bool bf16 = s.param_dtype == at::kBFloat16 || s.autocast == at::kBFloat16;
  const bool fp16 = s.param_dtype == at::kHalf || s.autocast == at::kHalf;
  if (bf16) {
    t.rel_floor = 0.05;  // bf16 keeps 8 bits of mantissa: see docs/TOLERANCE.md
  } else if (fp16 || s.tf32) {
    t.rel_floor = 0.02;  // fp16 / TF32 keep 11 bits
  } else {
    t.rel_floor = 1e-4;  // fp32 against fp32: same device, same kernels — only the ulp spread is allowed
    t.abs_floor = 1e-6;
  }
  return t;
}

std::vector<double> trailing_mean(const std::vector<double>& x, int64_t window) {
  std::vector<double> out(x.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sum += x[i];
    if (static_cast<int64_t>(i) >= window) sum -= x[i - window];
    out[i] = sum / static_cast<double>(std::min<int64_t>(i + 1, window));
  }
  return out;
}

namespace {
std::string num(double v, int prec = 4) {
  std::ostringstream os;
  os.precision(prec);
  os << v;
  return os.str();
}
double mean_range(const std::vector<double>& x, size_t from, size_t to) {
  double s = 0;
  size_t n = 0;
  for (size_t i = from; i < to && i < x.size(); ++i)
    if (std::isfinite(x[i])) s += x[i], ++n;
  return n ? s / n : NAN;
}
}  // namespace

Verdict judge(const std::string& status, const std::string& error, const engine::Trajectory& run,
              const engine::Trajectory& reference, const std::vector<double>& loss_spread, const Tolerance& tol) {
  Verdict v;
  v.skipped_steps = run.skipped_steps();
  const auto ref_s = trailing_mean(reference.column(engine::kLoss), tol.window);
  const auto spread_s = trailing_mean(loss_spread, tol.window);
  v.reference_smoothed = ref_s;
  for (size_t s = 0; s < ref_s.size(); ++s)
    v.band.push_back(std::max({tol.abs_floor, tol.rel_floor * std::abs(ref_s[s]),
                               tol.k * (s < spread_s.size() ? spread_s[s] : 0.0)}));
  if (status == "error") {
    v.verdict = "error";
    v.message = "raised: " + error;
    return v;
  }
  if (status == "nonfinite") {
    v.verdict = "nonfinite";
    v.message = "non-finite values reached the parameters by step " + std::to_string(run.size() - 1);
    return v;
  }
  const size_t n = std::min<size_t>(run.rows.size(), reference.rows.size());
  if (n == 0) {
    v.verdict = "error";
    v.message = "no steps to compare";
    return v;
  }
  const auto run_s = trailing_mean(run.column(engine::kLoss), tol.window);
  v.run_smoothed = run_s;
  double first_dev = 0, first_band = 0;
  for (size_t s = 0; s < n; ++s) {
    const double band = v.band[s];
    const double dev = std::abs(run_s[s] - ref_s[s]);
    const double bands = std::isfinite(dev) ? dev / band : INFINITY;
    v.deviation_bands.push_back(bands);
    if (bands > v.max_deviation_bands) {
      v.max_deviation_bands = bands;
      v.max_deviation_step = static_cast<int64_t>(s);
    }
    if (bands > 1.0 && v.first_divergence_step < 0) {
      v.first_divergence_step = static_cast<int64_t>(s);
      first_dev = run_s[s] - ref_s[s];
      first_band = band;
    }
  }
  const size_t last = n - 1;
  v.final_loss_ratio = run_s[last] / ref_s[last];
  const double pn_run = run.rows[last][engine::kParamNorm], pn_ref = reference.rows[last][engine::kParamNorm];
  v.param_drift = std::abs(pn_run - pn_ref) / pn_ref;
  const size_t from = v.first_divergence_step >= 0 ? static_cast<size_t>(v.first_divergence_step) : 0;
  v.update_ratio = mean_range(run.column(engine::kUpdateNorm), from, n) /
                   mean_range(reference.column(engine::kUpdateNorm), from, n);

  if (v.first_divergence_step < 0) {
    v.verdict = "tracks";
    v.message = "within the band at every step (max " + num(v.max_deviation_bands, 3) + " of it, at step " +
                std::to_string(v.max_deviation_step) + ")";
    return v;
  }
  // progress: how much of the reference's loss decrease the run achieved (first window vs last window)
  const size_t w0 = std::min<size_t>(n - 1, static_cast<size_t>(tol.window - 1));
  v.progress_ratio = (run_s[w0] - run_s[last]) / (ref_s[w0] - ref_s[last]);
  const bool worse = run_s[last] > ref_s[last];
  const bool updates_vanished = v.update_ratio < tol.stall_update_ratio;
  const bool barely_learned = v.progress_ratio >= 0 && v.progress_ratio < tol.stall_progress_ratio;
  v.verdict = (worse && (updates_vanished || barely_learned)) ? "stalls" : "diverges";
  std::ostringstream m;
  m << "left the band at step " << v.first_divergence_step << " (loss " << num(run_s[from]) << " vs reference "
    << num(ref_s[from]) << ", off by " << num(first_dev, 3) << " > band " << num(first_band, 3) << "), max "
    << num(v.max_deviation_bands, 3) << " bands at step " << v.max_deviation_step << ", final loss ratio "
    << num(v.final_loss_ratio, 4) << ", update norm " << num(v.update_ratio, 3) << "x and loss progress "
    << num(v.progress_ratio, 3) << "x the reference's";
  v.message = m.str();
  return v;
}

}  // namespace ampcheck::verdict
