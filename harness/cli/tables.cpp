// The result table of check, validate and judge (commands.h).
#include "cli/commands.h"

#include "io/text.h"
#include "report/format.h"

#include <iomanip>
#include <iostream>
#include <sstream>

namespace ampcheck::cli {

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
          << std::setw(10) << r.verdict << std::setw(17)
          << (report::format_number(r.first_loss) + ">" + report::format_number(r.final_loss)) << std::setw(8)
          << (r.first_divergence_step >= 0 ? std::to_string(r.first_divergence_step) : "-") << std::setw(16)
          << (r.deciding_signal.empty() ? r.max_signal : r.deciding_signal) << std::setw(9)
          << report::format_number(r.max_deviation_bands, 3) << std::setw(9)
          << report::format_number(r.final_loss_ratio, 4) << std::setw(9) << report::format_number(r.param_drift, 3)
          << std::setw(8) << r.skipped_steps << (r.pass ? "PASS" : "FAIL") << "\n";
  }
  // findings that did not set a verdict, one line each (signals not judged, diagnostics, precision not in effect)
  for (const auto& r : summary.scenarios)
    for (const auto& w : r.warnings) table << "WARN " << r.name << " (" << w.signal << "): " << w.message << "\n";
  // the engine path each run took where engine options were requested: applied, and refused with the reason
  for (const auto& r : summary.scenarios)
    if (!r.engine.empty() && r.engine != "stock") table << "ENGINE " << r.name << ": " << r.engine << "\n";
  std::cout << io::printable_text(table.str());
}

void print_sweep_table(const usecases::SweepResult& r) {
  std::ostringstream t;
  auto mib = [](double b) { return b > 0 ? report::format_number(b / 1048576.0, 4) : std::string("-"); };
  t << "\n"
    << std::left << std::setw(22) << "strategy" << std::setw(11) << "verdict" << std::setw(16) << "signal"
    << std::setw(9) << "margin" << std::setw(9) << "skipped" << std::setw(10) << "ms/step" << std::setw(11)
    << "tokens/s" << std::setw(10) << "peak MiB" << std::setw(9) << "vs fp32"
    << "result\n";
  t << std::left << std::setw(22) << "fp32 (reference)" << std::setw(11) << "-" << std::setw(16) << "-" << std::setw(9)
    << "-" << std::setw(9) << r.fp32.skipped_steps << std::setw(10) << report::format_number(r.fp32.median_step_ms, 3)
    << std::setw(11) << report::format_number(r.fp32.tokens_per_s, 4) << std::setw(10) << mib(r.fp32.peak_memory_bytes)
    << std::setw(9) << "1"
    << "\n";
  using usecases::RecordingOutcome;
  for (const auto& row : r.rows) {
    const auto& j = row.judged;
    t << std::left << std::setw(22) << row.strategy << std::setw(11)
      << (row.outcome == RecordingOutcome::Judged ? j.verdict : usecases::to_string(row.outcome)) << std::setw(16)
      << (j.deciding_signal.empty() ? j.max_signal : j.deciding_signal) << std::setw(9)
      << report::format_number(j.max_deviation_bands, 3) << std::setw(9) << j.skipped_steps << std::setw(10)
      << report::format_number(j.median_step_ms, 3) << std::setw(11) << report::format_number(j.tokens_per_s, 4)
      << std::setw(10) << mib(j.peak_memory_bytes) << std::setw(9) << report::format_number(row.speedup, 3)
      << (row.outcome == RecordingOutcome::Refused ? "n/a"
          : j.pass                                 ? "PASS"
                                                   : "FAIL")
      << "\n";
  }
  for (const auto& row : r.rows)
    if (!row.judged.pass || row.outcome != RecordingOutcome::Judged)
      t << row.strategy << ": " << row.judged.message << "\n";
  t << "RECOMMENDATION: " << r.recommendation << "\n";
  std::cout << io::printable_text(t.str());
}

void print_localize_table(const usecases::LocalizeResult& r) {
  std::ostringstream t;
  auto mib = [](int64_t b) { return b > 0 ? report::format_number(b / 1048576.0, 4) : std::string("-"); };
  t << "\n"
    << std::left << std::setw(30) << "scenario" << std::setw(22) << "strategy" << std::setw(11) << "verdict"
    << std::setw(32) << "keep in FP32" << std::setw(9) << "probes" << std::setw(17) << "ms/step kept/run"
    << std::setw(20) << "peak MiB kept/run"
    << "result\n";
  for (const auto& s : r.scenarios) {
    const auto& L = s.localization;
    std::string keep = !s.localized ? "-" : L.found ? "" : "no small set";
    for (const auto& m : L.found ? L.modules : std::vector<std::string>{}) keep += (keep.empty() ? "" : ",") + m;
    const std::string probes =
        s.localized ? std::to_string(L.probes.size()) + "/" + std::to_string(static_cast<int64_t>(s.probe_bound)) : "-";
    const bool cost = s.localized && L.found;
    t << std::left << std::setw(30) << s.scenario << std::setw(22) << s.strategy << std::setw(11) << s.row.verdict
      << std::setw(32) << keep << std::setw(9) << probes << std::setw(17)
      << (cost ? report::format_number(s.kept_ms_per_step, 3) + "/" + report::format_number(s.failing_ms_per_step, 3)
               : "-")
      << std::setw(20) << (cost ? mib(s.kept_peak_memory_bytes) + "/" + mib(s.failing_peak_memory_bytes) : "-")
      << (s.row.pass ? "PASS" : "FAIL") << "\n";
  }
  for (const auto& s : r.scenarios) t << s.scenario << ": " << s.row.message << "\n";
  std::cout << io::printable_text(t.str());
}

}  // namespace ampcheck::cli
