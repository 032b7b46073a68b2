// One run judged against its reference — the one path by which check, judge and validate's statistical mode decide:
// the verdict (verdict::judge), the warnings the caller knows to add (an engine run's, a recording's, a partial run's,
// the ranks' consistency), and the pass rule's decision (verdict::decide). Then the verdict into the run summary's
// row and its series into the result trajectory file.
#pragma once

#include "trajectory/run_status.h"
#include "trajectory/trajectory_file.h"
#include "report/summary.h"
#include "verdict/pass_rule.h"
#include "verdict/verdict.h"

#include <functional>
#include <string>
#include <vector>

namespace ampcheck::usecases {

struct RunToJudge {
  trajectory::RunStatus status;  // Completed | NonFinite | Error (a partial run: Completed, judged on its steps)
  std::string error;             // the run's error message (status Error)
  const trajectory::Trajectory& trajectory;
  // where the run first went non-finite (first_nonfinite_note; "" if it never did): appended to the verdict's message
  std::string first_nonfinite = {};
};

// Where a run first went non-finite, for its verdict message: "first non-finite: module h.3.mlp.c_proj (forward) at
// step 0", or "first non-finite at step 2 (no module's output or input gradient held an inf/NaN)"; "" when step is
// empty or negative (the run never went non-finite). From an engine run (engine::RunOutcome::first_nonfinite_*) or a
// recording's attributes first_nonfinite_step / _module / _pass (the Python recorder's nonfinite.py).
// (`op`: the recording's first_nonfinite_op where the recorder traced it — the first aten operation, or why none)
std::string first_nonfinite_note(const std::string& step, const std::string& module, const std::string& pass,
                                 const std::string& op = "");

struct ReferenceToJudge {
  const trajectory::Trajectory& trajectory;
  const std::vector<trajectory::LabelledTrajectory>& noise;
};

struct Judged {
  verdict::Verdict verdict;  // its message is the decision's verdict_message (with skipped steps out of bounds)
  verdict::Decision decision;
};

// verdict::judge, then add_warnings (may be empty), then verdict::decide.
Judged judge_run(const RunToJudge& run, const ReferenceToJudge& reference, const verdict::Expectation& expected,
                 const verdict::Tolerance& tolerance, bool strict,
                 const std::function<void(verdict::Verdict&)>& add_warnings = {});

// The verdict's fields, signals and warnings into the row.
void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v);
// The verdict and its decision into the row: verdict, PASS/FAIL, message, and fill_verdict_fields.
void fill_result(report::ScenarioSummary& row, const Judged& j);
// The reference's loss and spread, the smoothed curves, the allowed deviation and every judged signal's margin.
void add_verdict_series(trajectory::TrajectoryFile& tf, const verdict::Verdict& v,
                        const trajectory::Trajectory& reference, const std::vector<double>& loss_spread);

}  // namespace ampcheck::usecases
