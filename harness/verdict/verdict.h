// Verdicts: a run's trajectory compared with its FP32 reference on every signal the trajectory holds.
//
//   error      the engine raised (message kept)
//   nonfinite  NaN/inf reached the parameters (or the final loss), or non-finite grads were applied
//   tracks     every signal within its allowed deviation at every step (signals.h: loss, true grad norm, update
//              norm, zero / subnormal / non-finite grad elements, skipped steps)
//   stalls     a signal fired that says learning was lost: updates or grads collapsed, grads underflowed, too many
//              steps skipped, or the loss shed only part of what the reference shed
//   diverges   a signal fired otherwise (loss off in either direction while learning, grads or updates too large)
// When several signals fire, the one with the largest margin (deviation / allowed) decides the verdict; the message
// names every signal that fired, largest first. docs/TOLERANCE.md documents every constant and its calibration.
#pragma once

#include "engine/precision.h"
#include "engine/trajectory.h"
#include "verdict/signals.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::verdict {

// The default tolerance (one for every strategy: the allowed deviations come from measured FP32 noise, not from
// the number format).
Tolerance default_tolerance(const engine::Strategy& s);

struct Verdict {
  std::string verdict;                 // tracks | diverges | stalls | nonfinite | error
  std::string deciding_signal;         // the signal that set the verdict ("" for tracks / error / status)
  int64_t first_divergence_step = -1;  // first step the deciding signal was out
  double max_deviation_bands = 0;      // the largest margin over all judged signals (deviation / allowed)
  int64_t max_deviation_step = -1;
  std::string max_signal;              // which signal that margin belongs to
  double final_loss_ratio = NAN;       // smoothed run / smoothed reference at the last common step
  double param_drift = NAN;            // |param_norm_run - param_norm_ref| / param_norm_ref at the last common step
  double update_ratio = NAN;           // mean update norm run / reference over the steps taken
  double progress_ratio = NAN;         // loss shed by the run / by the reference (smoothed, first window to last)
  int64_t skipped_steps = 0;
  std::string message;                 // one sentence on what happened
  std::vector<SignalResult> signals;   // every signal, judged or not (empty for error / nonfinite status)
  // Per-step series for reports: the smoothed reference loss and its allowed deviation (whenever a reference is
  // given), the smoothed run loss and its deviation in allowed units (completed runs).
  std::vector<double> reference_smoothed, band, run_smoothed, deviation_bands;
};

std::string report_margin(double m);  // a margin as two significant digits

// status: "completed" | "nonfinite" | "error"; error: the engine's message for "error".
Verdict judge(const std::string& status, const std::string& error, const engine::Trajectory& run,
              const engine::Trajectory& reference, const std::vector<NoiseRun>& noise, const Tolerance& tol);

// Data parallel: ranks that disagreed at a cross-rank check (harness/dist/) make the verdict `diverges`, with the
// check's message first, whatever rank 0's own signals say: a run whose ranks hold different models or scales is
// not one training run any more.
void apply_rank_consistency(Verdict& v, int64_t diverged_step, const std::string& message);

}  // namespace ampcheck::verdict
