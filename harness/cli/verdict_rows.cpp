// The verdict into the run summary's row, its series into the result file, the result table (verdict_rows.h).
#include "cli/verdict_rows.h"

#include "report/format.h"

#include "io/text.h"

#include <iomanip>
#include <iostream>
#include <sstream>

namespace ampcheck::cli {

namespace {
std::string fmt(double v, int prec = 4) { return report::format_number(v, prec); }
}  // namespace

void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v) {
  row.first_divergence_step = v.first_divergence_step;
  row.max_deviation_bands = v.max_deviation_bands;
  row.deciding_signal = v.deciding_signal;
  row.max_signal = v.max_signal;
  for (const auto& g : v.signals)
    row.signals.push_back({g.name, g.unit, g.judged, g.fired, g.decides, g.verdict, g.first_step, g.max_step,
                           g.max_margin, g.deviation, g.allowed, g.noise, g.run_value, g.reference_value, g.message});
  row.final_loss_ratio = v.final_loss_ratio;
  row.param_drift = v.param_drift;
  for (const auto& w : v.warnings) row.warnings.push_back({w.signal, w.message});
}

void fill_result(report::ScenarioSummary& row, const verdict::Verdict& v, const verdict::Decision& d) {
  row.verdict = v.verdict;
  row.pass = d.pass;
  row.message = d.message;
  fill_verdict_fields(row, v);
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

void print_result_table(const report::RunSummary& summary) {
  std::ostringstream table;  // printed printable (io/text.h): names, messages and warnings may quote a file's text
  table << "\n"
        << std::left << std::setw(38) << "scenario" << std::setw(11) << "device" << std::setw(10) << "expect"
        << std::setw(10) << "verdict" << std::setw(17) << "loss first>last" << std::setw(8) << "from" << std::setw(16)
        << "signal" << std::setw(9) << "margin" << std::setw(9) << "ratio" << std::setw(9) << "drift" << std::setw(8)
        << "skipped"
        << "result\n";
  for (const auto& r : summary.scenarios) {
    table << std::left << std::setw(38) << r.name << std::setw(11) << r.device_class << std::setw(10) << r.expect
          << std::setw(10) << r.verdict << std::setw(17) << (fmt(r.first_loss) + ">" + fmt(r.final_loss))
          << std::setw(8) << (r.first_divergence_step >= 0 ? std::to_string(r.first_divergence_step) : "-")
          << std::setw(16) << (r.deciding_signal.empty() ? r.max_signal : r.deciding_signal) << std::setw(9)
          << fmt(r.max_deviation_bands, 3) << std::setw(9) << fmt(r.final_loss_ratio, 4) << std::setw(9)
          << fmt(r.param_drift, 3) << std::setw(8) << r.skipped_steps << (r.pass ? "PASS" : "FAIL") << "\n";
  }
  // findings that did not set a verdict, one line each (signals not judged, diagnostics, precision not in effect)
  for (const auto& r : summary.scenarios)
    for (const auto& w : r.warnings) table << "WARN " << r.name << " (" << w.signal << "): " << w.message << "\n";
  // the engine path each run took where engine options were requested: applied, and refused with the reason
  for (const auto& r : summary.scenarios)
    if (!r.engine.empty() && r.engine != "stock") table << "ENGINE " << r.name << ": " << r.engine << "\n";
  std::cout << io::printable_text(table.str());
}

}  // namespace ampcheck::cli
