// Shapes: what a fired outcome signal's trajectory looked like, named in words, so that a verdict says what happened
// and not only that a signal crossed its allowance. The signals (signals.h) decide whether a run fails; a shape
// decides the verdict's word where the signal alone would name the wrong one, and leads the message (verdict.h:
// stalls needs the loss still out at the last step; a transient it recovered from diverges).
//
//   loss excursion   the smoothed loss out of its allowance for a while and back within it until the last step:
//                    a transient (a loss spike the run recovered from), not a stall — nothing was lost at the end.
//                    Named "loss spike at step S (+R nats), recovered by step T" where the run's smoothed loss rose
//                    above its level before the excursion by more than the allowance, and it says whether FP32 spiked
//                    too over the same steps (the reference's smoothed loss rose by more than the allowance as well).
//                    A loss still out at the last step is no excursion: the signal's own rule decides (stalls /
//                    diverges) and the message says it did not come back.
//   scaled grads     the true grad norm a steady factor above the reference's (the 10th..90th percentile of the
//                    ratio within a factor kSteadyFactor) while the grad norm fired and the loss tracks: the gradients
//                    are scaled — a loss / gradient scaling difference (the loss not divided by the accumulation
//                    steps, gradients read or clipped at the GradScaler's scale). Still an outcome that fails
//                    (diverges): AdamW hides a constant factor from the loss, but clipping, SGD and weight decay
//                    do not. A ratio that grows or wanders (stale gradients accumulating) is no such shape.
// docs/TOLERANCE.md gives the constants' calibration on the campaign.
#pragma once

#include "trajectory/trajectory.h"
#include "verdict/signals.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace ampcheck::verdict {

// The loss signal's excursion (signals.h loss_signal). `recovered` is false for a signal that did not fire or is
// still out at the last step.
struct LossExcursion {
  bool recovered = false;
  int64_t out_from = -1;          // first step beyond the allowance
  int64_t back_from = -1;         // recovered: first step of the final stretch within the allowance (to the last step)
  int64_t last_step = -1;         // the last step compared
  double last_margin = NAN;       // |deviation| / allowed at the last step
  double last_deviation = NAN;    // nats, run - reference (smoothed), at the last step
  bool run_spiked = false;        // the run's smoothed loss rose above its level before the excursion by > allowed
  int64_t spike_step = -1;        // run_spiked: the step of the run's highest raw loss in the excursion
  double run_rise = NAN;          // nats: the run's smoothed peak above its smoothed level before the excursion
  bool reference_spiked = false;  // the reference's smoothed loss rose by > allowed over the same steps
  int64_t reference_spike_step = -1;
  double reference_rise = NAN;  // nats, as run_rise for the reference
};

// A fired loss signal's excursion. `loss` must be loss_signal(run, ref, ...)'s result (its margin series); the
// final stretch within the allowance must last at least tol.window steps to count as recovered.
LossExcursion loss_excursion(const SignalResult& loss, const trajectory::Trajectory& run,
                             const trajectory::Trajectory& ref, const Tolerance& tol);
// "loss spike at step 31 (+0.42 nats over its level before), recovered by step 52: within the allowance from there
// to the last step (59: 0.06 nats above, 0.4 of the allowed); FP32 spiked too (+0.38 nats at step 30)".
std::string describe(const LossExcursion& e);

// The gradient norm's shape against the reference's.
struct ScaledGrads {
  bool scaled = false;      // one factor > 1 (below) while the loss tracks
  bool throughout = false;  // over every judged step; else from out_from (the signal's first step out) on
  int64_t out_from = -1;
  double factor = NAN;           // median ratio run / reference over those steps (smoothed)
  double low = NAN, high = NAN;  // its 10th and 90th percentiles
};

// One factor: the 10th percentile of the ratio above 1 and the 90th within kSteadyFactor of it, over every judged
// step or, failing that, from the signal's first step out on, where that is at least half of them. Calibrated on
// the campaign (docs/TOLERANCE.md): undivided accumulation over 2 micro-batches under SGD stays within 1.59x..2.0x.
constexpr double kSteadyFactor = 1.5;

// grad_norm and loss: norm_ratio_signal(kGradNorm, ...) and loss_signal(...) of the same run and reference; the
// ratio on the steps the grad norm was out is read from the trajectories (trailing mean of the log ratio over the
// steps the optimizer took, as the signal smooths it).
ScaledGrads scaled_grads(const SignalResult& grad_norm, const SignalResult& loss, const trajectory::Trajectory& run,
                         const trajectory::Trajectory& ref, const Tolerance& tol);
// "scaled gradients: true grad norm 4.1x the reference's throughout (3.9x..4.3x, 10th..90th percentile), loss tracks
// — a loss/grad scaling difference, e.g. the loss not divided by the accumulation steps or gradients read at the
// GradScaler's scale (before unscale_)".
std::string describe(const ScaledGrads& g);

}  // namespace ampcheck::verdict
