// What `check` and `judge` both do with a verdict: copy it and the pass rule's decision into the run summary's row,
// add its series to the result trajectory file, and print the result table.
#pragma once

#include "trajectory/trajectory_file.h"
#include "report/summary.h"
#include "verdict/pass_rule.h"
#include "verdict/verdict.h"

#include <vector>

namespace ampcheck::cli {

// The verdict's fields, signals and warnings into the row.
void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v);
// The verdict and its decision (verdict::decide) into the row: verdict, PASS/FAIL, message, and fill_verdict_fields.
void fill_result(report::ScenarioSummary& row, const verdict::Verdict& v, const verdict::Decision& d);
// The reference's loss and spread, the smoothed curves, the allowed deviation and every judged signal's margin.
void add_verdict_series(trajectory::TrajectoryFile& tf, const verdict::Verdict& v,
                        const trajectory::Trajectory& reference, const std::vector<double>& loss_spread);
void print_result_table(const report::RunSummary& summary);

}  // namespace ampcheck::cli
