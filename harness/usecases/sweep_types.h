// The sweep's result as its rooms share it (sweep.h runs the sweep, sweep_answer.h gives its answer): the timing
// constants, a strategy's row, the whole result. Below both, so that neither header includes the other.
#pragma once

#include "usecases/localize.h"
#include "usecases/recording_outcome.h"

#include "report/summary.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// Speed rankings (docs/USING.md "Speed rankings"): a ratio to FP32 is decisive only outside max(kTimingFloor, the
// FP32 runs' spread); otherwise up to kTimingRounds rounds (--timing-rounds) of short interleaved re-runs (an FP32 run,
// then the strategy's, kTimingSteps steps each) measure both under the same load, until decisive.
constexpr double kTimingFloor = 1.05;
constexpr int64_t kTimingSteps = 20;  // kTimingRounds, --timing-rounds' default: usecases/options.h

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

}  // namespace ampcheck::usecases
