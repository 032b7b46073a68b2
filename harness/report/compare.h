// compare — two run directories side by side (two drivers, two GPUs, two commits): verdicts that changed, loss and
// throughput and memory ratios, and whether anything regressed beyond the user's thresholds.
#pragma once

#include "report/summary.h"

#include <string>
#include <vector>

namespace ampcheck::report {

struct CompareThresholds {
  double max_slowdown = 1.10;       // B's median step time / A's above this is a regression, when it also stands
                                    // out of the noise: B's 10th-percentile step slower than A's 90th
  double max_memory_growth = 1.10;  // B's peak memory / A's above this is a regression
  double max_loss_change = 0.02;    // |B's final loss / A's - 1| above this is a regression
};

struct ScenarioComparison {
  std::string name;
  std::string verdict_a, verdict_b;
  bool pass_a = false, pass_b = false;
  double step_time_ratio = NAN, memory_ratio = NAN, final_loss_ratio = NAN;  // B / A
  std::vector<std::string> regressions;                                      // empty: fine
  std::vector<std::string> notes;  // beyond a threshold but not a regression (step time within noise)
};

struct Comparison {
  std::vector<ScenarioComparison> scenarios;
  std::vector<std::string> only_in_a, only_in_b;
  bool regressed() const;
};

Comparison compare_runs(const RunSummary& a, const RunSummary& b, const CompareThresholds& t);
std::string format_comparison(const RunSummary& a, const RunSummary& b, const Comparison& c);

}  // namespace ampcheck::report
