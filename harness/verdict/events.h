// Events — the signals counted on a run alone, with no reference to compare (verdict/signals.h has the others and
// the types):
//   nonfinite_grads  non-finite grad elements on a step the optimizer took → nonfinite
//   skipped       skipped steps / steps ≤ max_skipped_fraction → stalls
//   fp8_saturated (fp8 strategies) per step, the largest fraction of one FP8 cast's elements beyond the format's
//                 range (clipped to its max; NaN/inf without a scale) ≤ fp8_saturated_floor, not smoothed — a step
//                 that clipped a large share of a tensor computed a wrong forward or backward → diverges
//   fp8_flushed   (fp8 strategies) the largest fraction of one cast's elements flushed to zero, smoothed like the
//                 other fractions, ≤ fp8_flushed_floor → stalls (the information never reached the matmul)
//                 FP32 has no FP8 casts: these two are absolute floors, calibrated on correct and broken FP8
//                 recipes at two scales (docs/TOLERANCE.md).
#pragma once

#include "verdict/signals.h"

#include "trajectory/trajectory.h"

#include <vector>

namespace ampcheck::verdict {

// Every event of the run in report order: nonfinite_grads, skipped and, for a run with FP8 casts, fp8_saturated and
// fp8_flushed — a run that ended non-finite is judged on these alone (verdict.h).
std::vector<SignalResult> run_events(const trajectory::Trajectory& run, const Tolerance& tol);

SignalResult nonfinite_signal(const trajectory::Trajectory& run);
SignalResult skipped_signal(const trajectory::Trajectory& run, const Tolerance& tol);
// fp8_saturated (saturated = true) or fp8_flushed; judged = false for a run without FP8 casts.
SignalResult fp8_signal(bool saturated, const trajectory::Trajectory& run, const Tolerance& tol);

}  // namespace ampcheck::verdict
