// Events: the signals counted on a run alone (events.h has the rules; docs/TOLERANCE.md the calibration).
#include "verdict/events.h"

#include "verdict/kind.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ampcheck::verdict {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

std::vector<SignalResult> run_events(const trajectory::Trajectory& run, const Tolerance& tol) {
  std::vector<SignalResult> out = {nonfinite_signal(run), skipped_signal(run, tol)};
  if (!run.fp8.empty())  // FP8 runs only
    for (bool saturated : {true, false}) out.push_back(fp8_signal(saturated, run, tol));
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// non-finite grads, skipped steps

SignalResult nonfinite_signal(const trajectory::Trajectory& run) {
  SignalResult r;
  r.name = "nonfinite_grads";
  r.unit = "steps";
  r.judged = true;
  int64_t with = 0, applied = 0;
  r.margin_series.assign(run.rows.size(), kNaN);
  r.allowed_series.assign(run.rows.size(), 0.0);
  for (size_t s = 0; s < run.rows.size(); ++s) {
    const double f = run.rows[s][trajectory::kFracNonfinite];
    if (!std::isfinite(f)) continue;
    const bool bad = f > 0, taken = run.rows[s][trajectory::kSkipped] < 0.5;
    r.margin_series[s] = bad && taken ? INFINITY : 0.0;  // binary: any step taken with non-finite grads
    with += bad;
    if (bad && taken && applied++ == 0) r.first_step = static_cast<int64_t>(s);
  }
  r.fired = applied > 0;
  r.max_margin = r.fired ? INFINITY : 0.0;  // nothing is allowed: no margin to measure
  r.max_step = r.first_step;
  r.deviation = static_cast<double>(applied);
  r.allowed = 0;
  r.run_value = static_cast<double>(with);
  r.reference_value = 0;
  if (r.fired) r.verdict = to_string(Kind::NonFinite);
  r.facts = NonfiniteFacts{applied, with};
  return r;
}

SignalResult skipped_signal(const trajectory::Trajectory& run, const Tolerance& tol) {
  SignalResult r;
  r.name = "skipped";
  r.unit = "share";
  r.judged = !run.rows.empty();
  const int64_t n = run.size();
  const double allowed_steps = tol.max_skipped_fraction * static_cast<double>(n);
  int64_t k = 0;
  r.margin_series.assign(run.rows.size(), kNaN);
  r.allowed_series.assign(run.rows.size(), tol.max_skipped_fraction);
  for (int64_t s = 0; s < n; ++s) {
    k += run.rows[s][trajectory::kSkipped] > 0.5;
    r.margin_series[s] = allowed_steps > 0 ? static_cast<double>(k) / allowed_steps : 0.0;
    if (static_cast<double>(k) > allowed_steps && r.first_step < 0) r.first_step = s;
  }
  const double share = n > 0 ? static_cast<double>(k) / static_cast<double>(n) : 0.0;
  r.max_margin = share / tol.max_skipped_fraction;
  r.max_step = n - 1;
  r.deviation = share;
  r.allowed = tol.max_skipped_fraction;
  r.run_value = static_cast<double>(k);
  r.reference_value = 0;
  r.fired = r.max_margin > 1.0;
  if (r.fired) r.verdict = to_string(Kind::Stalls);
  r.facts = SkippedFacts{k, n};
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// FP8 casts

SignalResult fp8_signal(bool saturated, const trajectory::Trajectory& run, const Tolerance& tol) {
  SignalResult r;
  r.name = saturated ? "fp8_saturated" : "fp8_flushed";
  r.unit = "fraction";
  const auto& p = run.fp8;
  Fp8Facts facts;
  facts.saturated = saturated;
  facts.casts = !p.empty();
  r.facts = facts;
  if (p.empty()) return r;
  const auto& m = saturated ? p.saturated : p.flushed;
  const size_t n = std::min(m.size(), run.rows.size()), nc = p.casts.size();
  // per cast: its per-step series (smoothed for flushed); per step: the worst cast
  std::vector<double> worst(n, kNaN);
  std::vector<int64_t> worst_cast(n, -1);
  for (size_t c = 0; c < nc; ++c) {
    std::vector<double> x(n);
    for (size_t s = 0; s < n; ++s) x[s] = m[s][c];
    if (!saturated) x = trailing_mean(x, tol.window);
    for (size_t s = 0; s < n; ++s)
      if (std::isfinite(x[s]) && (!std::isfinite(worst[s]) || x[s] > worst[s])) worst[s] = x[s], worst_cast[s] = c;
  }
  r.decides = false;  // a diagnostic: what the casts did; the outcome signals say whether it cost anything
  const double floor = saturated ? tol.fp8_saturated_floor : tol.fp8_flushed_floor;
  const std::vector<double> allowed(n, floor), none(n, kNaN);
  judge_series(r, worst, allowed, none, [](double d) { return std::max(d, 0.0); });
  if (!r.judged) return r;
  r.run_value = worst[r.max_step];
  r.reference_value = 0;
  const int64_t c = worst_cast[r.max_step];
  facts.cast = c >= 0 ? p.casts[c] : "?";
  facts.scale = c >= 0 && r.max_step < static_cast<int64_t>(p.scale.size()) ? p.scale[r.max_step][c] : kNaN;
  r.facts = facts;
  if (r.fired) r.verdict = to_string(saturated ? Kind::Diverges : Kind::Stalls);
  return r;
}

}  // namespace ampcheck::verdict
