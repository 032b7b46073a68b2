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

}  // namespace ampcheck::cli
