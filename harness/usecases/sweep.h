// sweep: which precision strategy is safe and fastest for the user's own model, on this machine. The user's unchanged
// training command runs once per run as a separate process, told through the environment which run it is
// (AMPCHECK_PLAN: docs/USING.md "The sweep's environment contract"); the recorder / integrations apply the plan and
// record. Three FP32 runs (the reference, another seed, the first optimizer step skipped) give the reference and its
// noise; every candidate strategy is judged against it as `judge` judges; --localize bisects the module tree of a
// failing strategy (localize.h). The sweep directory is written in place and resumable: finished runs are reused
// (their plan unchanged), --force redoes them.
#pragma once

#include "usecases/options.h"
#include "usecases/sweep_types.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// The strategies a sweep offers on a device ("cpu" | "cuda").
std::vector<std::string> sweep_strategies(const std::string& device);

SweepResult sweep(const SweepOptions& o, std::ostream& log);

}  // namespace ampcheck::usecases
