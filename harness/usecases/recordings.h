// The pieces of `reference` and `judge` that `sweep` and the Python package's in-process API (harness/python) reuse:
// a reference built in memory from FP32 recordings, a reference read, and one recording judged against it.
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

// A reference file as `judge` reads it (contained: a malformed HDF5 file is an error naming it) and checks it (it
// has noise runs).
trajectory::TrajectoryFile read_reference(const std::string& path);

// One recording judged against `ref` (read from reference_path) as `judge` judges it (judge_runs.cpp): its row, and
// its annotated trajectory written to out_dir/<row name>.h5 (replacing one there; out_dir "": nothing written — the
// Python package's ampcheck.judge). j.first_steps > 0: only the recording's first steps, as a partial run.
report::ScenarioSummary judge_recording(const std::string& path, const trajectory::TrajectoryFile& ref,
                                        const std::string& reference_path, const JudgeInputs& j,
                                        const std::string& out_dir, bool strict);

}  // namespace ampcheck::usecases
