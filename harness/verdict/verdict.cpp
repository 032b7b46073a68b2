// Verdict: the signals (signals.cpp, events.cpp) computed, put into words (words.cpp), combined into one verdict and
// message.
#include "verdict/verdict.h"

#include "verdict/events.h"
#include "verdict/shapes.h"
#include "verdict/words.h"

#include "io/text.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <variant>

namespace ampcheck::verdict {

Tolerance default_tolerance() { return Tolerance{}; }

namespace {
double mean_finite(const std::vector<double>& x, const std::vector<double>& skipped) {
  double s = 0;
  size_t n = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && (i >= skipped.size() || skipped[i] < 0.5)) s += x[i], ++n;
  return n ? s / static_cast<double>(n) : NAN;
}

// Every signal, in report order: those against the reference (signals.h), then the events (events.h).
std::vector<SignalResult> all_signals(const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                                      const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  std::vector<SignalResult> out = {loss_signal(run, ref, noise, tol),
                                   norm_ratio_signal(trajectory::kGradNorm, run, ref, noise, tol),
                                   norm_ratio_signal(trajectory::kUpdateNorm, run, ref, noise, tol),
                                   fraction_signal(trajectory::kFracZero, run, ref, noise, tol),
                                   fraction_signal(trajectory::kFracSubnormal, run, ref, noise, tol)};
  for (auto& e : run_events(run, tol)) out.push_back(std::move(e));
  return out;
}
}  // namespace

Verdict judge(trajectory::RunStatus status, const std::string& error, const trajectory::Trajectory& run,
              const trajectory::Trajectory& reference, const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  Verdict v;
  v.skipped_steps = run.skipped_steps();
  if (status != trajectory::RunStatus::Completed) {  // the reference's curve and its allowance for the report's chart
    SignalResult chart = loss_signal(reference, reference, noise, tol);
    v.reference_smoothed = std::move(chart.reference_smoothed);
    v.band = std::move(chart.allowed_series);
  }
  if (status == trajectory::RunStatus::Error) {
    v.verdict = to_string(Kind::Error);
    v.message = "raised: " + error;
    return v;
  }
  if (status == trajectory::RunStatus::NonFinite) {
    v.verdict = to_string(Kind::NonFinite);
    // judged on the events alone (events.h); one first step in the headline and the signal lines: where non-finite
    // grads were first applied when they were, else the first step whose loss was non-finite, else the step the run
    // stopped at
    v.signals = run_events(run, tol);
    set_messages(v.signals);
    const SignalResult& nf = v.signals.front();
    int64_t first_bad_loss = -1;
    for (int64_t s = 0; s < run.size() && first_bad_loss < 0; ++s)
      if (!std::isfinite(run.rows[s][trajectory::kLoss])) first_bad_loss = s;
    const int64_t last = run.size() - 1;
    if (nf.fired)
      v.message = "non-finite grads applied by the optimizer from step " + std::to_string(nf.first_step) + " (" +
                  std::to_string(static_cast<int64_t>(nf.deviation)) + " step(s)); the parameters were " +
                  "non-finite when the run stopped at step " + std::to_string(last);
    else if (first_bad_loss >= 0)
      v.message = "the loss was non-finite from step " + std::to_string(first_bad_loss) + "; the run stopped at step " +
                  std::to_string(last);
    else
      v.message = "non-finite values reached the parameters at step " + std::to_string(last);
    v.first_divergence_step = nf.fired ? nf.first_step : first_bad_loss >= 0 ? first_bad_loss : last;
    for (const auto& s : v.signals)  // an FP8 cast that overflowed to NaN says where the NaN came from
      if (std::holds_alternative<Fp8Facts>(s.facts) && s.fired) v.message += "; " + s.message;
    return v;
  }
  std::vector<SignalResult> signals = all_signals(run, reference, noise, tol);
  v.reference_smoothed = signals.front().reference_smoothed;  // the loss signal's curves are the verdict's
  const size_t n = std::min<size_t>(run.rows.size(), reference.rows.size());
  if (n == 0) {
    v.verdict = to_string(Kind::Error);
    v.message = "no steps to compare";
    return v;
  }
  v.signals = std::move(signals);
  set_messages(v.signals);  // the numbers first, then their words (words.h)
  const SignalResult& loss = v.signals.front();
  v.run_smoothed = loss.run_smoothed;
  v.run_smoothed.resize(n);
  v.deviation_bands = loss.margin_series;
  v.band = loss.allowed_series;

  const size_t last = n - 1, w0 = std::min<size_t>(last, static_cast<size_t>(tol.window - 1));
  v.final_loss_ratio = v.run_smoothed[last] / v.reference_smoothed[last];
  const double pn_run = run.rows[last][trajectory::kParamNorm], pn_ref = reference.rows[last][trajectory::kParamNorm];
  v.param_drift = std::abs(pn_run - pn_ref) / pn_ref;
  v.update_ratio = mean_finite(run.column(trajectory::kUpdateNorm), run.column(trajectory::kSkipped)) /
                   mean_finite(reference.column(trajectory::kUpdateNorm), {});
  v.progress_ratio =
      (v.run_smoothed[w0] - v.run_smoothed[last]) / (v.reference_smoothed[w0] - v.reference_smoothed[last]);

  std::vector<const SignalResult*> fired, diagnostics;
  for (const auto& s : v.signals) {
    if (!s.judged) continue;
    if (!s.decides) {
      if (s.fired) diagnostics.push_back(&s);
      continue;
    }
    if (s.max_margin > v.max_deviation_bands || v.max_signal.empty()) {
      v.max_deviation_bands = s.max_margin;
      v.max_deviation_step = s.max_step;
      v.max_signal = s.name;
    }
    if (s.fired) fired.push_back(&s);
  }
  const auto by_margin = [](const SignalResult* a, const SignalResult* b) { return a->max_margin > b->max_margin; };
  std::stable_sort(diagnostics.begin(), diagnostics.end(), by_margin);
  if (fired.empty()) {
    v.verdict = to_string(Kind::Tracks);
    std::ostringstream m;
    m << "every outcome signal within its allowed deviation; closest: " << v.max_signal << " at "
      << io::number_text(v.max_deviation_bands, 2) << " of it (step " << v.max_deviation_step << ")";
    v.message = m.str();
    // a diagnostic beyond its allowance while every outcome tracks: a warning, not a failure
    for (const auto* d : diagnostics)
      add_warning(v, d->name, d->message + " — diagnostic only: loss, grad norm and updates track FP32");
    return v;
  }
  std::stable_sort(fired.begin(), fired.end(), by_margin);
  v.verdict = fired.front()->verdict;
  v.deciding_signal = fired.front()->name;
  v.first_divergence_step = fired.front()->first_step;
  std::string msg;
  for (const auto* s : fired) msg += (msg.empty() ? "" : "; ") + s->message;
  for (const auto* d : diagnostics) msg += "; likely cause (" + d->name + "): " + d->message;
  // the shape first where it names what happened better than the signal's size (shapes.h)
  const auto grad_norm =
      std::find_if(v.signals.begin(), v.signals.end(), [](const SignalResult& s) { return s.name == "grad_norm"; });
  if (is(v.verdict, Kind::Diverges) && grad_norm != v.signals.end())
    if (const std::string shape = describe(scaled_grads(*grad_norm, loss, run, reference, tol)); !shape.empty())
      msg = shape + "; " + msg;
  v.message = msg;
  return v;
}

void add_warning(Verdict& v, const std::string& signal, const std::string& message) {
  v.warnings.push_back({signal, message});
  v.message += "; warning: " + message;
}

std::string precision_not_in_effect(bool claims_reduced, const trajectory::Trajectory& run,
                                    const trajectory::Trajectory& reference, const std::vector<NoiseRun>& noise,
                                    const std::string& cause) {
  if (!claims_reduced) return "";
  const size_t n = std::min(run.rows.size(), reference.rows.size());
  if (n == 0 || run.rows.size() != reference.rows.size()) return "";
  // FP32's own rounding noise per step: the largest |loss - reference loss| of the ±1-ulp noise runs (0 without
  // any), as an envelope over ±kPrecisionWindow steps, and never below kPrecisionUlps float32 ulps of the loss — what
  // another CPU's FP32 kernels differ by (the committed CPU references replayed on an Intel Xeon with AMX differ from
  // the AMD EPYC that recorded them by at most 1.5 ulps of the loss on the ci suite's micro GPT). Reduced precision
  // leaves that in its first steps: fp16 / bf16 autocast on the micro GPT by 4-27 ulps at step 1 (docs/TOLERANCE.md).
  constexpr int64_t kPrecisionWindow = 5;
  constexpr double kPrecisionUlps = 4.0;
  std::vector<double> ulp(n, 0.0);
  for (const auto& nr : noise) {
    if (nr.label.rfind("ulp", 0) != 0) continue;
    for (size_t s = 0; s < n && s < nr.trajectory.rows.size(); ++s) {
      const double d = std::abs(nr.trajectory.rows[s][trajectory::kLoss] - reference.rows[s][trajectory::kLoss]);
      if (std::isfinite(d)) ulp[s] = std::max(ulp[s], d);
    }
  }
  bool identical = true;
  for (size_t s = 0; s < n; ++s) {
    const double a = run.rows[s][trajectory::kLoss], b = reference.rows[s][trajectory::kLoss];
    if (!std::isfinite(a) || !std::isfinite(b)) return "";
    const double d = std::abs(a - b);
    if (d > 0) identical = false;
    double allowed = kPrecisionUlps * std::ldexp(std::abs(b), -23);  // float32: 23 mantissa bits
    for (size_t j = s >= kPrecisionWindow ? s - kPrecisionWindow : 0; j <= std::min(n - 1, s + kPrecisionWindow); ++j)
      allowed = std::max(allowed, ulp[j]);
    if (d > allowed) return "";  // beyond FP32's rounding noise at this step: some reduced precision was in effect
  }
  std::string m =
      std::string("mixed precision not in effect: the loss is ") +
      (identical ? "bit-identical to the FP32 reference's" : "within FP32's own rounding noise of the reference's") +
      " at all " + std::to_string(n) + " steps, while the run claims a reduced-precision strategy";
  if (!cause.empty()) m += " (" + cause + ")";
  return m;
}

const std::vector<int>& judged_columns() {
  static const std::vector<int> columns = {
      trajectory::kGradNorm,      trajectory::kUpdateNorm, trajectory::kFracZero, trajectory::kFracSubnormal,
      trajectory::kFracNonfinite, trajectory::kSkipped,    trajectory::kLr};
  return columns;
}

std::vector<Warning> unjudged_columns(const trajectory::Trajectory& run,
                                      const std::vector<std::string>& columns_present, bool recorded) {
  std::vector<Warning> out;
  for (int c : judged_columns()) {
    const std::string name = trajectory::column_name(c);
    if (std::find(columns_present.begin(), columns_present.end(), name) == columns_present.end()) continue;
    // the steps that count: those the optimizer took (a skipped step's grads are not judged anyway)
    bool any = false, taken = false;
    for (const auto& row : run.rows) {
      const bool skipped = c != trajectory::kSkipped && c != trajectory::kLr && row[trajectory::kSkipped] > 0.5;
      if (skipped) continue;
      taken = true;
      any |= !std::isnan(row[c]);
    }
    if (any || !taken) continue;
    std::string m = name + " not judged: every value NaN";
    if (recorded && (c == trajectory::kGradNorm || c == trajectory::kFracZero || c == trajectory::kFracSubnormal ||
                     c == trajectory::kFracNonfinite))
      m += " — was step() called after zero_grad()?";
    out.push_back({"not_judged", m});
  }
  return out;
}

void apply_rank_consistency(Verdict& v, int64_t diverged_step, const std::string& message) {
  if (diverged_step < 0 || is(v.verdict, Kind::Error)) return;
  v.verdict = to_string(Kind::Diverges);
  v.deciding_signal = "ranks";
  v.first_divergence_step = diverged_step;
  v.message = message + (v.message.empty() ? "" : "; " + v.message);
}

}  // namespace ampcheck::verdict
