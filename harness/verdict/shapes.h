// Shapes: what a fired outcome signal's trajectory looked like, named in words, so that a verdict says what happened
// and not only that a signal crossed its allowance. The signals (signals.h) decide whether a run fails; a shape
// leads the message where the signal's size alone would mislead (verdict.h). The loss signal's own shape, the loss
// excursion (a transient it recovered from diverges; stalls needs the loss still out at the last step), decides that
// signal's word and lives beside it (signals.h LossExcursion); the shapes here read several signals together.
//
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
