// The runs of a sweep (sweep.h): each planned run's AMPCHECK_PLAN file, the user's command run with it (or its finished
// recording reused), and what the recording shows about the plan — followed, refused, ignored, or never read.
#pragma once

#include "usecases/options.h"
#include "usecases/recording_outcome.h"

#include "io/process.h"
#include "trajectory/trajectory_file.h"

#include <string>
#include <vector>

namespace ampcheck::usecases {

struct PlannedRun {
  std::string run;           // fp32, fp32-seed, fp32-skip, <strategy>, probe-<strategy>-<n>
  std::string strategy;      // fp32, tf32, bf16-autocast, fp16-autocast-scaler, pure-bf16, fp16-master-weights, fp8
  std::string perturbation;  // "" | seed | skip
  int64_t seed_offset = 0;
  std::vector<std::string> keep_fp32;
  int64_t max_steps = 0;
};

struct SweepPaths {
  std::string dir, runs, plans, logs;  // the sweep directory; its runs/<key>, plans/<key>, logs/<key>
  std::string key, workload;
};

struct ExecutedRun {
  PlannedRun plan;
  std::string recording, log;  // paths
  io::ProcessResult process;
  bool reused = false;  // a finished recording of the same plan, from an earlier sweep
};

// The plan file's text (docs/USING.md "The sweep's environment contract").
std::string plan_text(const PlannedRun& p, const std::string& recording, const std::string& workload);

// Runs the command for one planned run, or reuses its finished recording (same plan, status completed / nonfinite /
// error) unless force.
ExecutedRun execute_run(const PlannedRun& p, const SweepPaths& paths, const SweepOptions& o, std::ostream& log);

// What the recording of a run shows: outcome Judged (file holds the planned run's recording; `file` filled) or
// Partial (stopped at its time limit, judged on its steps), else Error / Refused / NotOptedIn / IgnoredPlan /
// RecordedNothing (recording_outcome.h), with `message` saying what happened and what to add.
struct RecordingCheck {
  RecordingOutcome outcome = RecordingOutcome::Judged;
  std::string message;
  trajectory::TrajectoryFile file;
};
RecordingCheck check_recording(const ExecutedRun& e);

// The last lines of a log (for a message).
std::string log_tail(const std::string& path, size_t max_chars = 1200);

}  // namespace ampcheck::usecases
