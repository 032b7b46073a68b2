// What `check` and `judge` both do with a verdict: copy it into the run summary's row, add its series to the
// result trajectory file, and print the result table.
#pragma once

#include "reference/trajectory_file.h"
#include "report/summary.h"
#include "verdict/verdict.h"

#include <vector>

namespace ampcheck::cli {

void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v);
// The reference's loss and spread, the smoothed curves, the allowed deviation and every judged signal's margin.
void add_verdict_series(reference::TrajectoryFile& tf, const verdict::Verdict& v, const engine::Trajectory& reference,
                        const std::vector<double>& loss_spread);
void print_result_table(const report::RunSummary& summary);

// The verdict's warnings into the row, and what they do to PASS/FAIL: every warning `expected` names must be there
// (a planted event whose only trace is a diagnostic), and under `strict` a warning not expected fails the row.
void apply_warnings(report::ScenarioSummary& row, const verdict::Verdict& v, const std::vector<std::string>& expected,
                    bool strict);

}  // namespace ampcheck::cli
