// Verdict: the signals (signals.cpp) combined into one verdict and message.
#include "verdict/verdict.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ampcheck::verdict {

Tolerance default_tolerance(const engine::Strategy&) { return Tolerance{}; }

namespace {
double mean_finite(const std::vector<double>& x, const std::vector<double>& skipped) {
  double s = 0;
  size_t n = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && (i >= skipped.size() || skipped[i] < 0.5)) s += x[i], ++n;
  return n ? s / static_cast<double>(n) : NAN;
}
}  // namespace

Verdict judge(const std::string& status, const std::string& error, const engine::Trajectory& run,
              const engine::Trajectory& reference, const std::vector<NoiseRun>& noise, const Tolerance& tol) {
  Verdict v;
  v.skipped_steps = run.skipped_steps();
  v.reference_smoothed = trailing_mean(reference.column(engine::kLoss), tol.window);
  if (status != "completed")  // the loss allowance around the reference, for the report's chart (else: below)
    v.band = loss_signal(reference, reference, noise, tol).allowed_series;
  if (status == "error") {
    v.verdict = "error";
    v.message = "raised: " + error;
    return v;
  }
  if (status == "nonfinite") {
    v.verdict = "nonfinite";
    v.message = "non-finite values reached the parameters by step " + std::to_string(run.size() - 1);
    v.signals.push_back(nonfinite_signal(run));
    v.signals.push_back(skipped_signal(run, tol));
    for (bool saturated : {true, false}) {  // an FP8 cast that overflowed to NaN says where the NaN came from
      if (run.fp8.empty()) break;
      v.signals.push_back(fp8_signal(saturated, run, tol));
      if (v.signals.back().fired) v.message += "; " + v.signals.back().message;
    }
    return v;
  }
  const size_t n = std::min<size_t>(run.rows.size(), reference.rows.size());
  if (n == 0) {
    v.verdict = "error";
    v.message = "no steps to compare";
    return v;
  }
  v.signals = all_signals(run, reference, noise, tol);
  const SignalResult& loss = v.signals.front();
  v.run_smoothed = trailing_mean(run.column(engine::kLoss), tol.window);
  v.run_smoothed.resize(n);
  v.deviation_bands = loss.margin_series;
  v.band = loss.allowed_series;

  const size_t last = n - 1, w0 = std::min<size_t>(last, static_cast<size_t>(tol.window - 1));
  v.final_loss_ratio = v.run_smoothed[last] / v.reference_smoothed[last];
  const double pn_run = run.rows[last][engine::kParamNorm], pn_ref = reference.rows[last][engine::kParamNorm];
  v.param_drift = std::abs(pn_run - pn_ref) / pn_ref;
  v.update_ratio = mean_finite(run.column(engine::kUpdateNorm), run.column(engine::kSkipped)) /
                   mean_finite(reference.column(engine::kUpdateNorm), {});
  v.progress_ratio = (v.run_smoothed[w0] - v.run_smoothed[last]) /
                     (v.reference_smoothed[w0] - v.reference_smoothed[last]);

  std::vector<const SignalResult*> fired;
  std::string notes;
  for (const auto& s : v.signals) {
    if (!s.judged) continue;
    if (!s.decides) {
      if (s.fired) notes += "; " + s.message;
      continue;
    }
    if (s.max_margin > v.max_deviation_bands || v.max_signal.empty()) {
      v.max_deviation_bands = s.max_margin;
      v.max_deviation_step = s.max_step;
      v.max_signal = s.name;
    }
    if (s.fired) fired.push_back(&s);
  }
  if (fired.empty()) {
    v.verdict = "tracks";
    std::ostringstream m;
    m << "every signal within its allowed deviation; closest: " << v.max_signal << " at "
      << report_margin(v.max_deviation_bands) << " of it (step " << v.max_deviation_step << ")" << notes;
    v.message = m.str();
    return v;
  }
  std::stable_sort(fired.begin(), fired.end(),
                   [](const SignalResult* a, const SignalResult* b) { return a->max_margin > b->max_margin; });
  v.verdict = fired.front()->verdict;
  v.deciding_signal = fired.front()->name;
  v.first_divergence_step = fired.front()->first_step;
  std::string msg;
  for (const auto* s : fired) msg += (msg.empty() ? "" : "; ") + s->message;
  v.message = msg + notes;
  return v;
}

std::string report_margin(double m) {
  std::ostringstream os;
  os.precision(2);
  os << m;
  return os.str();
}

void apply_rank_consistency(Verdict& v, int64_t diverged_step, const std::string& message) {
  if (diverged_step < 0 || v.verdict == "error") return;
  v.verdict = "diverges";
  v.deciding_signal = "ranks";
  v.first_divergence_step = diverged_step;
  v.message = message + (v.message.empty() ? "" : "; " + v.message);
}

}  // namespace ampcheck::verdict
