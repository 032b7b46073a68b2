// Shapes: a fired outcome signal's trajectory named in words (shapes.h has the rules).
#include "verdict/shapes.h"

#include "io/text.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace ampcheck::verdict {

namespace {

double quantile(std::vector<double> x, double q) {  // x non-empty
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < x.size() ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// scaled gradients

ScaledGrads scaled_grads(const SignalResult& grad_norm, const SignalResult& loss, const trajectory::Trajectory& run,
                         const trajectory::Trajectory& ref, const Tolerance& tol) {
  ScaledGrads g;
  if (!grad_norm.fired || !(grad_norm.deviation > 0) || !loss.judged || loss.fired) return g;
  // the log ratio per step the optimizer took, smoothed as the signal smooths it
  const size_t n = std::min({run.rows.size(), ref.rows.size(), grad_norm.margin_series.size()});
  std::vector<double> log_ratio(n, NAN);
  for (size_t s = 0; s < n; ++s) {
    const double a = run.rows[s][trajectory::kGradNorm], b = ref.rows[s][trajectory::kGradNorm];
    if (run.rows[s][trajectory::kSkipped] < 0.5 && std::isfinite(a) && a > 0 && std::isfinite(b) && b > 0)
      log_ratio[s] = std::log(a / b);
  }
  const std::vector<double> smoothed = trailing_mean(log_ratio, tol.window);
  std::vector<std::pair<int64_t, double>> ratios;  // (step, smoothed ratio) over the judged steps
  for (size_t s = 0; s < n; ++s)
    if (!std::isnan(grad_norm.margin_series[s]) && std::isfinite(smoothed[s]))
      ratios.emplace_back(static_cast<int64_t>(s), std::exp(smoothed[s]));
  if (ratios.empty()) return g;
  // one factor from `from` on: above the reference at the 10th percentile, 90th / 10th within kSteadyFactor, over
  // at least half of the judged steps
  const auto steady_from = [&](int64_t from) {
    std::vector<double> x;
    for (const auto& [step, ratio] : ratios)
      if (step >= from) x.push_back(ratio);
    if (x.empty() || 2 * x.size() < ratios.size()) return false;
    g.low = quantile(x, 0.1);
    g.high = quantile(x, 0.9);
    g.factor = quantile(x, 0.5);
    return g.low > 1.0 && g.high / g.low <= kSteadyFactor;
  };
  g.throughout = steady_from(ratios.front().first);
  g.scaled = g.throughout || (grad_norm.first_step > ratios.front().first && steady_from(grad_norm.first_step));
  g.out_from = g.throughout ? ratios.front().first : grad_norm.first_step;
  return g;
}

std::string describe(const ScaledGrads& g) {
  if (!g.scaled) return "";
  std::ostringstream m;
  m << "scaled gradients: true grad norm " << io::number_text(g.factor, 2) << "x the reference's "
    << (g.throughout ? std::string("throughout") : "from step " + std::to_string(g.out_from)) << " ("
    << io::number_text(g.low, 3) << "x.." << io::number_text(g.high, 3)
    << "x, 10th..90th percentile), loss tracks — a loss/grad scaling "
    << "difference, e.g. the loss not divided by the accumulation steps or gradients read at the GradScaler's "
       "scale (before unscale_)";
  return m.str();
}

}  // namespace ampcheck::verdict
