// Verdicts: a run's trajectory compared with its FP32 reference.
//
// Both loss curves are smoothed with a trailing mean over `window` steps (the per-step loss of one batch is noisy;
// both runs see the same batches, so the smoothed difference measures how far the parameters have drifted). At each
// step the band is
//     band_s = max(abs_floor, rel_floor * ref_s, k * spread_s)
// where spread_s is the smoothed FP32 noise spread (±1-ulp initial weights) stored with the reference. The verdict:
//   error      the engine raised (message kept)
//   nonfinite  NaN/inf reached the parameters (or the final loss)
//   tracks     |run_s - ref_s| <= band_s at every step
//   stalls     left the band with a worse loss while learning stopped: its mean update norm since the first
//              divergence is < stall_update_ratio of the reference's, or its loss fell by less than
//              stall_progress_ratio of the reference's fall (but did not rise above where it started)
//   diverges   left the band otherwise (first step and size reported)
// The constants per strategy family and their calibration are documented in docs/TOLERANCE.md.
#pragma once

#include "engine/precision.h"
#include "engine/trajectory.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::verdict {

struct Tolerance {
  double abs_floor = 1e-3;       // nats
  double rel_floor = 0.02;       // fraction of the reference's smoothed loss
  double k = 3.0;                // multiple of the FP32 noise spread
  int64_t window = 10;           // smoothing window, steps
  double stall_update_ratio = 0.25;
  double stall_progress_ratio = 0.5;
};

// The default tolerance for a strategy (fp32 exact-ish, tf32 and fp16 tight, bf16 wider).
Tolerance default_tolerance(const engine::Strategy& s);

struct Verdict {
  std::string verdict;                 // tracks | diverges | stalls | nonfinite | error
  int64_t first_divergence_step = -1;
  double max_deviation_bands = 0;      // max_s |run_s - ref_s| / band_s
  int64_t max_deviation_step = -1;
  double final_loss_ratio = NAN;       // smoothed run / smoothed reference at the last common step
  double param_drift = NAN;            // |param_norm_run - param_norm_ref| / param_norm_ref at the last common step
  double update_ratio = NAN;           // mean update norm run / reference (after the first divergence, else all)
  double progress_ratio = NAN;         // (run first - run last) / (reference first - reference last), smoothed
  int64_t skipped_steps = 0;
  std::string message;                 // one sentence on what happened
  // Per-step series for reports: the smoothed reference and its band (whenever a reference is given), the
  // smoothed run and its deviation in band units (completed runs, over the steps both have).
  std::vector<double> reference_smoothed, band, run_smoothed, deviation_bands;
};

std::vector<double> trailing_mean(const std::vector<double>& x, int64_t window);

// status: "completed" | "nonfinite" | "error"; error: the engine's message for "error".
Verdict judge(const std::string& status, const std::string& error, const engine::Trajectory& run,
              const engine::Trajectory& reference, const std::vector<double>& loss_spread, const Tolerance& tol);

}  // namespace ampcheck::verdict
