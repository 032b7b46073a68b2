// The pieces of `reference` and `judge` that `sweep` reuses on recordings it made itself: a reference built in memory
// from FP32 recordings, and one recording judged against a reference already read.
#pragma once

#include "usecases/options.h"

#include "trajectory/trajectory_file.h"
#include "report/summary.h"

#include <string>

namespace ampcheck::usecases {

// The reference `ampcheck reference` writes, built in memory (make_reference.cpp); in.out and in.force unused.
trajectory::TrajectoryFile build_reference(const ReferenceInputs& in);

// A reference cut to its first `steps` steps (its noise runs and loss spread too): what a shorter run (a probe) is
// judged against.
trajectory::TrajectoryFile first_steps(const trajectory::TrajectoryFile& ref, int64_t steps);

// One recording judged against `ref` (read from reference_path) as `judge` judges it (judge_runs.cpp): its row, and
// its annotated trajectory written to out_dir/<row name>.h5 (replacing one there).
report::ScenarioSummary judge_recording(const std::string& path, const trajectory::TrajectoryFile& ref,
                                        const std::string& reference_path, const JudgeInputs& j,
                                        const std::string& out_dir, bool strict);

}  // namespace ampcheck::usecases
