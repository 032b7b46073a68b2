// The warnings of a completed run of ampcheck's own engine, added to its verdict: every column not judged, and the
// strategy's reduced precision not in effect. They need the engine's Strategy, which a judged external run does not
// have: so they live here, above engine and verdict, and harness/verdict stays a judge of data (trajectories) only.
#pragma once

#include "engine/precision.h"
#include "trajectory/trajectory.h"
#include "verdict/verdict.h"

#include <vector>

namespace ampcheck::run {

// `on_cuda`: TF32 exists there; on the CPU a tf32 run is FP32 and the warning says why.
void add_engine_run_warnings(verdict::Verdict& v, const trajectory::Trajectory& run, const engine::Strategy& strategy,
                             bool on_cuda, const trajectory::Trajectory& reference,
                             const std::vector<verdict::NoiseRun>& noise);

}  // namespace ampcheck::run
