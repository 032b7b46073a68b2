// An engine run judged: how check, localize and validate's statistical mode turn a run of the engine
// (run::ScenarioResult) into a verdict, the filled row and the annotated result file — one recipe, so the three judge
// alike (judge_runs.cpp judges a recording the same way through judge_run, with a recording's warnings).
#pragma once

#include "usecases/judge_run.h"

#include "engine/run_config.h"
#include "reference/reference_store.h"
#include "report/summary.h"
#include "run/scenario_run.h"
#include "trajectory/trajectory_file.h"

#include <ATen/ATen.h>

namespace ampcheck::usecases {

// The engine run `r` judged by judge_run against `reference` (a probe's cut to its length): its status, error,
// trajectory and where it first went non-finite (first_nonfinite_note); the warnings: the ranks' disagreement (a
// data-parallel run; none for one process) and, for a completed run, the engine's (add_engine_run_warnings with
// `strategy`, what the scenario asked for: columns not judged, precision not in effect).
Judged judge_engine_run(const run::ScenarioResult& r, const engine::Strategy& strategy, const at::Device& device,
                        const ReferenceToJudge& reference, const verdict::Expectation& expected,
                        const verdict::Tolerance& tolerance, bool strict);

// The device class whose FP32 references a run of `run` is judged against statistically (validate, validate --fleet):
// `device_class`'s where `root` holds one for it, else the nearest class's that has one (validate::nearest_classes);
// "" where no class has one.
std::string fp32_reference_class(const std::string& root, const std::string& device_class,
                                 const engine::RunConfig& run);

// Whether the result file carries the verdict: check and localize write it (the row's verdict); validate does not
// (its row ends with the bitwise verdict, which its `validation` attribute gives).
enum class VerdictInFile { Written, Left };

// The judgement into the row (fill_result) and into the run's result file `tf`: the verdict and its message as
// attributes (VerdictInFile::Written), the reference's path, and the verdict series (add_verdict_series).
void record_judgement(const Judged& j, const reference::Reference& ref, report::ScenarioSummary& row,
                      trajectory::TrajectoryFile& tf, VerdictInFile verdict_in_file);

}  // namespace ampcheck::usecases
