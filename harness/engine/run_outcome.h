// How a run of the engine ended (Trainer::run): its status, the error, where it failed, and the first step and module
// that went non-finite. What run/, the use cases, doctor and the data-parallel ranks read of a run without the
// Trainer itself.
#pragma once

#include "trajectory/run_status.h"

#include <cstdint>
#include <string>

namespace ampcheck::engine {

struct RunOutcome {
  // the trajectory file's status (trajectory/run_status.h); an engine run ends Completed, NonFinite or Error
  using Status = trajectory::RunStatus;
  Status status = Status::Completed;
  std::string error;         // the exception text for Error ("Attempting to unscale FP16 gradients.")
  int64_t failed_step = -1;  // step of the error / first non-finite loss or params
  int64_t steps_run = 0;
  // The first step that went non-finite (a non-finite loss or parameters, or a step the GradScaler skipped for inf /
  // NaN grads; -1: none) and the first module whose output (pass "forward", in forward order) or input gradient
  // ("backward", in backward order) held an inf / NaN on it, as models::module_tree names it ("" when none did, e.g.
  // a value planted into the grads after backward, or a step replayed from a CUDA graph).
  int64_t first_nonfinite_step = -1;
  std::string first_nonfinite_module;
  std::string first_nonfinite_pass;
};
// The status's word (trajectory::to_string): completed | nonfinite | error.
inline const char* status_name(RunOutcome::Status s) { return trajectory::to_string(s).c_str(); }

}  // namespace ampcheck::engine
