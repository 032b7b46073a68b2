// Verdicts: a run's trajectory compared with its FP32 reference on every signal the trajectory holds.
//
//   error      the engine raised (message kept)
//   nonfinite  NaN/inf reached the parameters (or the final loss), or non-finite grads were applied
//   tracks     every outcome signal within its allowed deviation at every step (signals.h: loss, true grad norm,
//              update norm, non-finite grads applied, skipped steps)
//   stalls     an outcome signal fired that says learning was lost: updates or grads collapsed, too many steps
//              skipped, or the loss shed only part of what the reference shed and is still out at the last step
//   diverges   an outcome signal fired otherwise (the loss moved elsewhere — to the end, or a spike it recovered
//              from —, grads or updates too large)
// A failing signal's shape is named in the message: the loss signal's own (signals.h LossExcursion) "loss spike at
// step S ..., recovered by step T (FP32 spiked too)", shapes.h's "scaled gradients: true grad norm 4.1x the
// reference's throughout ..., loss tracks".
// Outcomes decide, diagnostics explain: the zero / subnormal grad fractions and the FP8 cast probes never set the
// verdict. A diagnostic beyond its allowance while every outcome tracks is a warning (Verdict::warnings; `--strict`
// fails on warnings); beside a failing outcome it is named in the message as the likely cause.
// When several outcome signals fire, the one with the largest margin (deviation / allowed) decides the verdict; the
// message names every signal that fired, largest first. docs/TOLERANCE.md documents every constant and its calibration.
#pragma once

#include "trajectory/run_status.h"
#include "trajectory/trajectory.h"
#include "verdict/kind.h"
#include "verdict/signals.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::verdict {

// The default tolerance (one for every strategy: the allowed deviations come from measured FP32 noise, not from
// the number format).
Tolerance default_tolerance();

// A finding that does not change the verdict: a diagnostic signal beyond its allowance while the outcomes track,
// a signal that could not be judged although its column is present, mixed precision that never took effect.
struct Warning {
  std::string signal;   // zero_grads | subnormal_grads | fp8_saturated | fp8_flushed | not_judged | precision
  std::string message;  // one clause, e.g. "zero_grads: 20% of grad elements zero vs 1.8% in FP32 at step 118 ..."
};

struct Verdict {
  std::string verdict;                 // tracks | diverges | stalls | nonfinite | error
  std::string deciding_signal;         // the signal that set the verdict ("" for tracks / error / status)
  int64_t first_divergence_step = -1;  // first step the deciding signal was out
  double max_deviation_bands = 0;      // the largest margin over all judged signals (deviation / allowed)
  int64_t max_deviation_step = -1;
  std::string max_signal;         // which signal that margin belongs to
  double final_loss_ratio = NAN;  // smoothed run / smoothed reference at the last common step
  double param_drift = NAN;       // |param_norm_run - param_norm_ref| / param_norm_ref at the last common step
  double update_ratio = NAN;      // mean update norm run / reference over the steps taken
  double progress_ratio = NAN;    // loss shed by the run / by the reference (smoothed, first window to last)
  int64_t skipped_steps = 0;
  std::string message;                // one sentence on what happened
  std::vector<SignalResult> signals;  // every signal, judged or not (empty for error / nonfinite status)
  std::vector<Warning> warnings;      // tracks (or any verdict): findings that did not decide it
  // Per-step series for reports: the smoothed reference loss and its allowed deviation (whenever a reference is
  // given), the smoothed run loss and its deviation in allowed units (completed runs).
  std::vector<double> reference_smoothed, band, run_smoothed, deviation_bands;
};

// status: how the run ended — Completed (judged signal by signal), NonFinite, Error (error: the engine's message);
// a partial run (Running, Interrupted) is its caller's to judge as Completed on the steps it has.
Verdict judge(trajectory::RunStatus status, const std::string& error, const trajectory::Trajectory& run,
              const trajectory::Trajectory& reference, const std::vector<NoiseRun>& noise, const Tolerance& tol);

// Mixed precision that never took effect: a run that claims a reduced-precision strategy (claims_reduced) but whose
// loss is bit-identical to the FP32 reference's at every step, or within the spread of the reference's ±1-ulp noise
// runs (FP32's own rounding noise) at every step, computed in FP32. Returns the warning's message ("" if none).
// `cause` names what the run's attributes say about it (empty: unknown) and is appended.
std::string precision_not_in_effect(bool claims_reduced, const trajectory::Trajectory& run,
                                    const trajectory::Trajectory& reference, const std::vector<NoiseRun>& noise,
                                    const std::string& cause);

// The columns the signals read, in the order they are named (param_norm, loss_scale, step_time_ms and eval_loss are
// reported, not judged).
const std::vector<int>& judged_columns();

// A column the run holds but whose every value on the steps the optimizer took is NaN: nothing of it was judged.
// One warning per such column among the judged ones (grad_norm, update_norm, frac_zero_grad, ...); for a run of a
// user's loop (`recorded`) the grad columns name the likely cause (step() after zero_grad()).
std::vector<Warning> unjudged_columns(const trajectory::Trajectory& run,
                                      const std::vector<std::string>& columns_present, bool recorded);

// Adds a warning (and its clause to the message); the verdict itself is unchanged.
void add_warning(Verdict& v, const std::string& signal, const std::string& message);

// Data parallel: ranks that disagreed at a cross-rank check (harness/distributed/) make the verdict `diverges`, with
// the check's message first, whatever rank 0's own signals say: a run whose ranks hold different models or scales is
// not one training run any more.
void apply_rank_consistency(Verdict& v, int64_t diverged_step, const std::string& message);

}  // namespace ampcheck::verdict
