// compare implementation.
#include "report/compare.h"

#include "report/format.h"

#include "io/text.h"

#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

namespace ampcheck::report {

bool Comparison::regressed() const {
  if (!only_in_a.empty()) return true;  // a scenario that vanished is a regression of coverage
  for (const auto& s : scenarios)
    if (!s.regressions.empty()) return true;
  return false;
}

namespace {
double ratio(double b, double a) { return (std::isfinite(a) && std::isfinite(b) && a > 0) ? b / a : NAN; }
}  // namespace

Comparison compare_runs(const RunSummary& a, const RunSummary& b, const CompareThresholds& t) {
  Comparison c;
  std::map<std::string, const ScenarioSummary*> in_b;
  for (const auto& s : b.scenarios) in_b[s.name] = &s;
  std::map<std::string, bool> seen;
  for (const auto& sa : a.scenarios) {
    auto it = in_b.find(sa.name);
    if (it == in_b.end()) {
      c.only_in_a.push_back(sa.name);
      continue;
    }
    seen[sa.name] = true;
    const ScenarioSummary& sb = *it->second;
    ScenarioComparison x;
    x.name = sa.name;
    x.verdict_a = sa.verdict;
    x.verdict_b = sb.verdict;
    x.pass_a = sa.pass;
    x.pass_b = sb.pass;
    x.step_time_ratio = ratio(sb.median_step_ms, sa.median_step_ms);
    x.memory_ratio = ratio(static_cast<double>(sb.peak_memory_bytes), static_cast<double>(sa.peak_memory_bytes));
    x.final_loss_ratio = ratio(sb.final_loss, sa.final_loss);
    if (sa.verdict != sb.verdict) x.regressions.push_back("verdict " + sa.verdict + " -> " + sb.verdict);
    if (sa.pass && !sb.pass) x.regressions.push_back("PASS -> FAIL");
    if (x.step_time_ratio > t.max_slowdown) {
      // A slowdown counts when it stands out of the step-time noise both runs measured: B's fast steps (10th
      // percentile) slower than A's slow ones (90th). Host-bound tiny models on a GPU jitter by tens of percent from
      // run to run; a large model's steps agree to a fraction of a percent. Without percentiles (summary v1), the
      // median ratio alone decides.
      const bool spreads = std::isfinite(sa.p90_step_ms) && std::isfinite(sb.p10_step_ms);
      if (!spreads || sb.p10_step_ms > sa.p90_step_ms)
        x.regressions.push_back("step time x" + format_number(x.step_time_ratio, 3) + " > x" +
                                format_number(t.max_slowdown, 3));
      else
        x.notes.push_back("step time x" + format_number(x.step_time_ratio, 3) + " within noise (B p10 " +
                          format_number(sb.p10_step_ms, 3) + " ms <= A p90 " + format_number(sa.p90_step_ms, 3) +
                          " ms)");
    }
    if (x.memory_ratio > t.max_memory_growth)
      x.regressions.push_back("peak memory x" + format_number(x.memory_ratio, 3) + " > x" +
                              format_number(t.max_memory_growth, 3));
    if (std::isfinite(x.final_loss_ratio) && std::abs(x.final_loss_ratio - 1.0) > t.max_loss_change)
      x.regressions.push_back("final loss x" + format_number(x.final_loss_ratio, 4));
    c.scenarios.push_back(x);
  }
  for (const auto& sb : b.scenarios)
    if (!seen.count(sb.name)) c.only_in_b.push_back(sb.name);
  return c;
}

std::string format_comparison(const RunSummary& a, const RunSummary& b, const Comparison& c) {
  std::ostringstream os;
  os << "A: " << a.device_name << " (" << a.device_class << "), LibTorch " << a.libtorch_version
     << (a.git_commit.empty() ? "" : ", commit " + a.git_commit) << ", " << a.date << "\n"
     << "B: " << b.device_name << " (" << b.device_class << "), LibTorch " << b.libtorch_version
     << (b.git_commit.empty() ? "" : ", commit " + b.git_commit) << ", " << b.date << "\n\n";
  os << std::left << std::setw(38) << "scenario" << std::setw(24) << "verdict A -> B" << std::setw(12) << "step B/A"
     << std::setw(12) << "memory B/A" << std::setw(12) << "loss B/A"
     << "regressions\n";
  for (const auto& s : c.scenarios) {
    std::string regs;
    for (const auto& r : s.regressions) regs += (regs.empty() ? "" : "; ") + r;
    for (const auto& n : s.notes) regs += (regs.empty() ? "" : "; ") + std::string("note: ") + n;
    os << std::left << std::setw(38) << s.name << std::setw(24) << (s.verdict_a + " -> " + s.verdict_b) << std::setw(12)
       << format_number(s.step_time_ratio, 3) << std::setw(12) << format_number(s.memory_ratio, 3) << std::setw(12)
       << format_number(s.final_loss_ratio, 5) << (regs.empty() ? "-" : regs) << "\n";
  }
  for (const auto& n : c.only_in_a) os << n << ": only in A (missing from B)\n";
  for (const auto& n : c.only_in_b) os << n << ": only in B (new)\n";
  os << (c.regressed() ? "REGRESSION" : "no regression") << "\n";
  return io::printable_text(os.str());  // for the terminal: the summaries' text is printable already; this keeps it so
}

}  // namespace ampcheck::report
