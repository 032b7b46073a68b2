// sweep: which precision strategy is safe and fastest for the user's own model, on this machine. The user's unchanged
// training command runs once per run as a separate process, told through the environment which run it is
// (AMPCHECK_PLAN: docs/USING.md "The sweep's environment contract"); the recorder / integrations apply the plan and
// record. Three FP32 runs (the reference, another seed, the first optimizer step skipped) give the reference and its
// noise; every candidate strategy is judged against it as `judge` judges; --localize bisects the module tree of a
// failing strategy (localize.h). The sweep directory is written in place and resumable: finished runs are reused
// (their plan unchanged), --force redoes them.
#pragma once

#include "usecases/localize.h"
#include "usecases/options.h"
#include "usecases/recording_outcome.h"

#include "report/summary.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// Speed rankings (docs/USING.md "Speed rankings"): a ratio to FP32 is decisive only outside max(kTimingFloor, the
// FP32 runs' spread); otherwise up to kTimingRounds rounds (--timing-rounds) of short interleaved re-runs (an FP32 run,
// then the strategy's, kTimingSteps steps each) measure both under the same load, until decisive.
constexpr double kTimingFloor = 1.05;
constexpr int64_t kTimingSteps = 20;  // kTimingRounds, --timing-rounds' default: usecases/options.h

// The strategies a sweep offers on a device ("cpu" | "cuda").
std::vector<std::string> sweep_strategies(const std::string& device);

struct SweepRow {
  std::string strategy;
  RecordingOutcome outcome = RecordingOutcome::Judged;  // what its recording showed (recording_outcome.h)
  report::ScenarioSummary judged;  // the verdict, its signals, measurements (verdict "-" where not judged)
  double speedup = 0;              // FP32's ms/step over this run's (NaN where unmeasured)
  // the speed ranking against FP32: "faster" / "slower" only where the ratio lies outside the timing noise (the FP32
  // runs' spread, at least kTimingFloor), else "not decisive"; "" where unmeasured
  std::string speed;
  double speed_noise = NAN;  // the noise factor the ratio had to exceed
  // interleaved timing re-runs (FP32, this strategy, FP32, ...) where the first ranking was not decisive: each run's
  // steady-state ms/step (median after warm-up)
  std::vector<double> retimed_fp32_ms, retimed_ms;
  bool localized = false;
  Localization localization;
};

struct SweepResult {
  std::string dir, key;          // the sweep directory; the FP32 runs' cache key (the command, its directory, --steps)
  std::string device;            // cpu | cuda
  report::ScenarioSummary fp32;  // the FP32 run's row (measurements)
  // the timing noise: the largest over the smallest ms/step of the three FP32 runs (the same training, so any spread
  // is the machine's); a speed-up within it is not decisive (NaN where unmeasured)
  double timing_spread = 0;
  std::vector<double> fp32_runs_ms;  // the three FP32 runs' steady-state ms/step (fp32, fp32-seed, fp32-skip)
  int timing_reruns = 0;             // timing re-runs run (trained or reused)
  int64_t timing_rounds = 0;         // their budget per strategy (SweepOptions::timing_rounds)
  std::vector<SweepRow> rows;
  std::string recommendation;     // the fastest strategy that tracks, with what it costs and saves
  int trainings = 0, reused = 0;  // runs trained by this sweep, runs reused from an earlier one
  double seconds = 0;
  report::RunSummary summary;  // what summary.json / report.html hold
};

SweepResult sweep(const SweepOptions& o, std::ostream& log);

}  // namespace ampcheck::usecases
