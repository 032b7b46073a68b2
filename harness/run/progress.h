// Progress printing for long runs.
#pragma once

#include "engine/trainer.h"

#include <cstdint>

namespace ampcheck::run {

// A progress printer for long runs: on a terminal one line rewritten in place (step, loss, scale, ETA); otherwise a
// plain line every 10% of the steps.
engine::Trainer::ProgressFn terminal_progress(int64_t total_steps);

}  // namespace ampcheck::run
