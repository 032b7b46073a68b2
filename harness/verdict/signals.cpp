// Signals: per-step deviations of a run from its FP32 reference, each against the measured noise of the same
// metric, and the loss signal's excursion (signals.h has the rules; docs/TOLERANCE.md the calibration).
#include "verdict/signals.h"

#include "verdict/kind.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace ampcheck::verdict {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// Maximum over a centred window (steps s-window+1 .. s+window-1), NaN entries skipped (NaN where the whole window
// is NaN). The noise at one step is a small sample — four runs, which may cross the reference by chance — so it is
// read from the steps around it too.
std::vector<double> envelope(const std::vector<double>& x, int64_t window) {
  std::vector<double> out(x.size(), kNaN);
  const size_t w = static_cast<size_t>(std::max<int64_t>(window, 1));
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t from = i + 1 >= w ? i + 1 - w : 0, to = std::min(x.size() - 1, i + w - 1);
    for (size_t j = from; j <= to; ++j)
      if (std::isfinite(x[j])) out[i] = std::isfinite(out[i]) ? std::max(out[i], x[j]) : x[j];
  }
  return out;
}

// The largest of several per-step series (NaN entries skipped).
std::vector<double> pointwise_max(const std::vector<std::vector<double>>& xs, size_t n) {
  std::vector<double> out(n, kNaN);
  for (const auto& x : xs)
    for (size_t i = 0; i < n && i < x.size(); ++i)
      if (std::isfinite(x[i])) out[i] = std::isfinite(out[i]) ? std::max(out[i], x[i]) : x[i];
  return out;
}

// Per step: the deviation metric of one run against the reference, before smoothing.
//   aligned(s, j) -> deviation of run step s against reference step j (NaN if either is not measured);
// the value kept is the one of smallest magnitude over j in [s - K_s, s] (K_s = skips before s; a noise run is
// aligned by its own skips the same way: only the `skip` run has any).
template <class F>
std::vector<double> aligned_deviation(size_t n, const std::vector<int64_t>& skipped_before, F aligned) {
  std::vector<double> out(n, kNaN);
  for (size_t s = 0; s < n; ++s) {
    const int64_t k = s < skipped_before.size() ? skipped_before[s] : 0;
    for (int64_t j = static_cast<int64_t>(s); j >= static_cast<int64_t>(s) - k && j >= 0; --j) {
      const double d = aligned(s, static_cast<size_t>(j));
      if (std::isfinite(d) && (!std::isfinite(out[s]) || std::abs(d) < std::abs(out[s]))) out[s] = d;
    }
  }
  return out;
}

std::vector<double> smoothed_noise(const std::vector<NoiseRun>& noise, size_t n, int64_t window,
                                   const std::function<std::vector<double>(const trajectory::Trajectory&)>& metric) {
  std::vector<std::vector<double>> per_run;
  for (const auto& nr : noise) {
    std::vector<double> d = metric(nr.trajectory);
    for (auto& v : d) v = std::abs(v);
    per_run.push_back(std::move(d));
  }
  return envelope(pointwise_max(per_run, n), window);
}

// A metric applied to the run (skip-aligned) and to every noise run (no skips), and the allowance
// max(k × noise, floor) per step.
struct Measured {
  std::vector<double> deviation, noise, allowed;
};
template <class Metric>
Measured measure(const Metric& metric, const trajectory::Trajectory& run, const std::vector<NoiseRun>& noise, size_t n,
                 const Tolerance& tol, double floor);

}  // namespace

std::vector<double> trailing_mean(const std::vector<double>& x, int64_t window) {
  std::vector<double> out(x.size(), kNaN);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t from = i + 1 >= static_cast<size_t>(window) ? i + 1 - window : 0;
    double sum = 0;
    int64_t count = 0;
    for (size_t j = from; j <= i; ++j)  // a non-finite loss (an overflowing forward a scaler skipped) is no sample
      if (std::isfinite(x[j])) sum += x[j], ++count;
    if (count > 0) out[i] = sum / static_cast<double>(count);
  }
  return out;
}

std::vector<int64_t> skipped_before(const trajectory::Trajectory& run) {
  std::vector<int64_t> out(run.rows.size(), 0);
  int64_t k = 0;
  for (size_t s = 0; s < run.rows.size(); ++s) {
    out[s] = std::min<int64_t>(k, static_cast<int64_t>(s));
    if (run.rows[s][trajectory::kSkipped] > 0.5) ++k;
  }
  return out;
}

namespace {
template <class Metric>
Measured measure(const Metric& metric, const trajectory::Trajectory& run, const std::vector<NoiseRun>& noise, size_t n,
                 const Tolerance& tol, double floor) {
  Measured m;
  m.deviation = metric(run, skipped_before(run));
  m.noise = smoothed_noise(noise, n, tol.window,
                           [&](const trajectory::Trajectory& t) { return metric(t, skipped_before(t)); });
  m.allowed.assign(n, kNaN);
  for (size_t s = 0; s < n; ++s) m.allowed[s] = std::max(std::isfinite(m.noise[s]) ? tol.k * m.noise[s] : 0.0, floor);
  return m;
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// loss: the excursion (signals.h LossExcursion), then the signal

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
  const auto& run_sm = loss.run_smoothed;
  const auto& ref_sm = loss.reference_smoothed;
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

SignalResult loss_signal(const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                         const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  SignalResult r;
  r.name = "loss";
  r.unit = "nats";
  const size_t n = std::min(run.rows.size(), ref.rows.size());
  r.reference_smoothed = trailing_mean(ref.column(trajectory::kLoss), tol.window);
  r.run_smoothed = trailing_mean(run.column(trajectory::kLoss), tol.window);
  const auto& ref_sm = r.reference_smoothed;
  const auto& run_sm = r.run_smoothed;
  auto metric = [&](const trajectory::Trajectory& t, const std::vector<int64_t>& skips) {
    const auto sm = trailing_mean(t.column(trajectory::kLoss), tol.window);
    return aligned_deviation(std::min(n, sm.size()), skips, [&](size_t s, size_t j) { return sm[s] - ref_sm[j]; });
  };
  const auto noise_s = smoothed_noise(noise, n, tol.window,
                                      [&](const trajectory::Trajectory& t) { return metric(t, skipped_before(t)); });
  const auto dev = metric(run, skipped_before(run));
  std::vector<double> allowed(n);
  for (size_t s = 0; s < n; ++s) allowed[s] = std::isfinite(noise_s[s]) ? std::max(tol.k * noise_s[s], 1e-9) : kNaN;
  LossFacts facts;
  if (n == 0 || noise.empty()) {
    facts.no_steps = n == 0;
    facts.no_noise = noise.empty();
    r.facts = facts;
    return r;
  }
  judge_series(r, dev, allowed, noise_s, [](double d) { return std::abs(d); });
  if (r.max_step >= 0) {
    r.run_value = run_sm[r.max_step];
    r.reference_value = r.run_value - r.deviation;
  }
  const size_t last = n - 1, w0 = std::min<size_t>(last, static_cast<size_t>(tol.window - 1));
  facts.shed_run = run_sm[w0] - run_sm[last];
  facts.shed_ref = ref_sm[w0] - ref_sm[last];
  facts.shed_named = facts.shed_ref > allowed[last];
  facts.last_step = static_cast<int64_t>(last);
  facts.last_deviation = dev[last];
  facts.last_margin = r.margin_series[last];
  if (r.fired) {
    facts.excursion = loss_excursion(r, run, ref, tol);
    // Out for a while and back within the allowance until the last step is a transient, not a stall (signals.h).
    // Still out, having learned less than the reference but still learned: a stall. A run that ends above the
    // reference while it shed as much or more (it started elsewhere, or went up and came down) moved elsewhere.
    const bool stalls = !facts.excursion.recovered && facts.last_deviation > 0 && facts.shed_run >= 0 &&
                        facts.shed_run < facts.shed_ref;
    r.verdict = to_string(stalls ? Kind::Stalls : Kind::Diverges);
  }
  r.facts = facts;
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// grad norm, update norm: log ratios

SignalResult norm_ratio_signal(int column, const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                               const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  SignalResult r;
  const bool updates = column == trajectory::kUpdateNorm;
  r.name = updates ? "update_norm" : "grad_norm";
  r.unit = "log-ratio";
  const size_t n = std::min(run.rows.size(), ref.rows.size());
  // Updates are compared per unit of learning rate: a run delayed by skipped steps takes its k-th optimizer step
  // at a later point of the lr schedule than the reference took its k-th.
  // (a run that did not record its lr is compared without this alignment, on both sides)
  bool run_has_lr = false;
  for (const auto& row : run.rows) run_has_lr |= std::isfinite(row[trajectory::kLr]);
  auto per_lr = [&](const trajectory::Trajectory& t) {
    auto v = t.column(column);
    if (updates && run_has_lr)
      for (size_t s = 0; s < v.size(); ++s) {
        const double lr = t.rows[s][trajectory::kLr];
        v[s] = std::isfinite(lr) && lr > 0 ? v[s] / lr : v[s];
      }
    return v;
  };
  const auto ref_v = per_lr(ref);
  auto metric = [&](const trajectory::Trajectory& t, const std::vector<int64_t>& skips) {
    const auto v = per_lr(t);
    const auto raw = aligned_deviation(std::min(n, v.size()), skips, [&](size_t s, size_t j) {
      // a skipped step moves nothing by design, and its grads (inf, or zeroed by a clip of inf) are no sample of
      // learning: the skipped signal alone judges it
      if (t.rows[s][trajectory::kSkipped] > 0.5) return kNaN;
      if (!std::isfinite(v[s]) || !(ref_v[j] > 0) || !std::isfinite(ref_v[j])) return kNaN;
      return std::log(std::max(v[s], ref_v[j] * 1e-12) / ref_v[j]);  // an exact 0 counts as 1e-12 x
    });
    return trailing_mean(raw, tol.window);
  };
  const Measured measured = measure(metric, run, noise, n, tol, std::log(tol.ratio_floor));
  judge_series(r, measured.deviation, measured.allowed, measured.noise, [](double d) { return std::abs(d); });
  r.facts = RatioFacts{updates};
  if (!r.judged) return r;
  r.run_value = std::exp(r.deviation);  // the ratio run / reference at the max step
  r.reference_value = 1.0;
  if (r.fired) r.verdict = to_string(r.deviation < 0 ? Kind::Stalls : Kind::Diverges);
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// zero / subnormal grad elements: one-sided excess over the reference

SignalResult fraction_signal(int column, const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                             const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  SignalResult r;
  const bool zero = column == trajectory::kFracZero;
  r.name = zero ? "zero_grads" : "subnormal_grads";
  r.unit = "fraction";
  const size_t n = std::min(run.rows.size(), ref.rows.size());
  const auto ref_v = ref.column(column);
  auto metric = [&](const trajectory::Trajectory& t, const std::vector<int64_t>& skips) {
    const auto v = t.column(column);
    const auto raw = aligned_deviation(std::min(n, v.size()), skips, [&](size_t s, size_t j) {
      if (t.rows[s][trajectory::kSkipped] > 0.5) return kNaN;  // a skipped step's grads are no sample of learning
      return std::isfinite(v[s]) && std::isfinite(ref_v[j]) ? v[s] - ref_v[j] : kNaN;
    });
    return trailing_mean(raw, tol.window);
  };
  const Measured measured = measure(metric, run, noise, n, tol, tol.fraction_floor);
  judge_series(r, measured.deviation, measured.allowed, measured.noise, [](double d) { return std::max(d, 0.0); });
  r.facts = FractionFacts{zero};
  if (!r.judged) return r;
  const auto run_sm = trailing_mean(run.column(column), tol.window);
  r.run_value = run_sm[r.max_step];
  r.reference_value = r.run_value - r.deviation;
  r.decides = false;  // a diagnostic: it explains an outcome or warns, it never sets the verdict
  if (r.fired) r.verdict = to_string(Kind::Stalls);  // what it would point to: grads lost to underflow
  return r;
}

}  // namespace ampcheck::verdict
