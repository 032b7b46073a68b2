// One run judged against its reference; the verdict into the run summary's row, its series into the result file
// (judge_run.h).
#include "usecases/judge_run.h"

namespace ampcheck::usecases {

Judged judge_run(const RunToJudge& run, const ReferenceToJudge& reference, const verdict::Expectation& expected,
                 const verdict::Tolerance& tolerance, bool strict,
                 const std::function<void(verdict::Verdict&)>& add_warnings) {
  Judged j;
  j.verdict = verdict::judge(run.status, run.error, run.trajectory, reference.trajectory, reference.noise, tolerance);
  if (add_warnings) add_warnings(j.verdict);
  j.decision = verdict::decide(expected, verdict::observe(j.verdict, run.error), strict);
  if (!run.first_nonfinite.empty()) {  // said always, whatever was expected: where to look
    j.decision.verdict_message += "; " + run.first_nonfinite;
    j.decision.message += "; " + run.first_nonfinite;
  }
  j.verdict.message = j.decision.verdict_message;
  return j;
}

std::string first_nonfinite_note(const std::string& step, const std::string& module, const std::string& pass,
                                 const std::string& op) {
  if (step.empty() || step[0] == '-') return "";
  if (module.empty())
    return "first non-finite at step " + step + " (no module's output or input gradient held an inf/NaN)";
  return "first non-finite: module " + module + " (" + (pass.empty() ? "forward" : pass) + ") at step " + step +
         (op.empty() ? "" : "; first non-finite operation: " + op);
}

void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v) {
  row.first_divergence_step = v.first_divergence_step;
  row.max_deviation_bands = v.max_deviation_bands;
  row.deciding_signal = v.deciding_signal;
  row.max_signal = v.max_signal;
  row.signals.insert(row.signals.end(), v.signals.begin(), v.signals.end());  // each one's comparison, no series
  row.final_loss_ratio = v.final_loss_ratio;
  row.param_drift = v.param_drift;
  for (const auto& w : v.warnings) row.warnings.push_back({w.signal, w.message});
}

void fill_result(report::ScenarioSummary& row, const Judged& j) {
  row.verdict = j.verdict.verdict;
  row.pass = j.decision.pass;
  row.message = j.decision.message;
  fill_verdict_fields(row, j.verdict);
}

void add_verdict_series(trajectory::TrajectoryFile& tf, const verdict::Verdict& v,
                        const trajectory::Trajectory& reference, const std::vector<double>& loss_spread) {
  tf.series["reference_loss"] = reference.column(trajectory::kLoss);
  tf.series["reference_loss_spread"] = loss_spread;
  tf.series["reference_smoothed_loss"] = v.reference_smoothed;
  tf.series["band"] = v.band;
  if (!v.run_smoothed.empty()) tf.series["smoothed_loss"] = v.run_smoothed;
  if (!v.deviation_bands.empty()) tf.series["deviation_bands"] = v.deviation_bands;
  for (const auto& g : v.signals)
    if (g.judged) tf.series["margin_" + g.name] = g.margin_series;  // deviation / allowed per step
}

}  // namespace ampcheck::usecases
