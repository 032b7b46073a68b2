// Shapes: a fired outcome signal's trajectory named in words (shapes.h has the rules).
#include "verdict/shapes.h"

#include "io/text.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace ampcheck::verdict {

namespace {

std::string signed_nats(double v) { return (v >= 0 ? "+" : "") + io::number_text(v, 3) + " nats"; }

// The largest rise of a smoothed series over [from, to) above its value at `base`, and where it peaked.
std::pair<double, int64_t> rise_over(const std::vector<double>& smoothed, int64_t base, int64_t from, int64_t to) {
  double best = NAN;
  int64_t at = -1;
  if (base < 0 || base >= static_cast<int64_t>(smoothed.size()) || !std::isfinite(smoothed[base])) return {best, at};
  for (int64_t s = std::max<int64_t>(from, 0); s < to && s < static_cast<int64_t>(smoothed.size()); ++s)
    if (std::isfinite(smoothed[s]) && (!std::isfinite(best) || smoothed[s] - smoothed[base] > best))
      best = smoothed[s] - smoothed[base], at = s;
  return {best, at};
}

// The step of the largest finite raw value over [from, to), -1 if none.
int64_t argmax_over(const std::vector<double>& raw, int64_t from, int64_t to) {
  int64_t at = -1;
  for (int64_t s = std::max<int64_t>(from, 0); s < to && s < static_cast<int64_t>(raw.size()); ++s)
    if (std::isfinite(raw[s]) && (at < 0 || raw[s] > raw[at])) at = s;
  return at;
}

double quantile(std::vector<double> x, double q) {  // x non-empty
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < x.size() ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// loss excursion

LossExcursion loss_excursion(const SignalResult& loss, const trajectory::Trajectory& run,
                             const trajectory::Trajectory& ref, const Tolerance& tol) {
  LossExcursion e;
  const auto& margin = loss.margin_series;
  int64_t last = -1, last_out = -1;
  for (int64_t s = 0; s < static_cast<int64_t>(margin.size()); ++s) {
    if (std::isnan(margin[s])) continue;
    last = s;
    if (margin[s] > 1.0) last_out = s;
  }
  if (!loss.fired || last < 0) return e;
  const auto run_sm = trailing_mean(run.column(trajectory::kLoss), tol.window);
  const auto ref_sm = trailing_mean(ref.column(trajectory::kLoss), tol.window);
  if (last >= static_cast<int64_t>(std::min(run_sm.size(), ref_sm.size()))) return e;
  e.out_from = loss.first_step;
  e.last_step = last;
  e.last_margin = margin[last];
  e.last_deviation = run_sm[last] - ref_sm[last];
  // recovered: within the allowance from back_from to the last step, for at least one smoothing window
  e.back_from = last_out + 1;
  e.recovered = last_out < last && last - e.back_from + 1 >= tol.window;
  if (!e.recovered) return e;
  // the level before the excursion: the smoothed loss at the last step whose window the excursion cannot have
  // entered (out_from - window); an excursion from the first steps has no level before it, so no spike is named
  const int64_t base = e.out_from - tol.window;
  const double allowed =
      loss.allowed_series.size() > static_cast<size_t>(e.out_from) ? loss.allowed_series[e.out_from] : loss.allowed;
  const auto [run_rise, run_peak] = rise_over(run_sm, base, e.out_from, e.back_from);
  e.run_rise = run_rise;
  e.run_spiked = std::isfinite(run_rise) && run_rise > allowed;
  if (e.run_spiked)  // the raw loss's highest step within the smoothing window that led to the smoothed peak
    e.spike_step = argmax_over(run.column(trajectory::kLoss), run_peak - tol.window + 1, run_peak + 1);
  // the reference over the same steps (a spike may sit a few steps off in an equally valid training)
  const auto [ref_rise, ref_peak] = rise_over(ref_sm, base, e.out_from - tol.window + 1, e.back_from);
  e.reference_rise = ref_rise;
  e.reference_spiked = std::isfinite(ref_rise) && ref_rise > allowed;
  if (e.reference_spiked)
    e.reference_spike_step = argmax_over(ref.column(trajectory::kLoss), ref_peak - tol.window + 1, ref_peak + 1);
  return e;
}

std::string describe(const LossExcursion& e) {
  if (!e.recovered) return "";
  std::ostringstream m;
  if (e.run_spiked)
    m << "loss spike at step " << e.spike_step << " (" << signed_nats(e.run_rise)
      << " over its level before, smoothed), recovered by step " << e.back_from;
  else
    m << "loss out of its allowance from step " << e.out_from << ", recovered by step " << e.back_from;
  m << ": within the allowance from there to the last step (" << e.last_step << ": "
    << io::number_text(std::abs(e.last_deviation), 3) << " nats " << (e.last_deviation >= 0 ? "above" : "below")
    << " the reference, " << io::number_text(e.last_margin, 2) << " of the allowed)";
  if (e.run_spiked) {
    if (e.reference_spiked)
      m << "; FP32 spiked too (" << signed_nats(e.reference_rise) << " at step " << e.reference_spike_step << ")";
    else if (std::isfinite(e.reference_rise))
      m << "; FP32 did not spike (its smoothed loss rose at most "
        << io::number_text(std::max(0.0, e.reference_rise), 3) << " nats over the same steps)";
  }
  return m.str();
}

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
