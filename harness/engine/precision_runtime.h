// PrecisionRuntime — a precision strategy's per-step state inside the trainer's step, behind one interface. Casts,
// autocast, loss scaling and master weights need none (the trainer applies them); FP8 does: its casts keep scales,
// amax histories and per-step probe rows (engine/fp8.h). The trainer brackets each step's forward/backward with
// begin_step/end_step, flushes the probe rows with the trajectory, drops them when a step raises, and saves/restores
// the state with checkpoints; it knows nothing else of FP8.
#pragma once

#include "engine/optimizer.h"
#include "engine/precision.h"
#include "trajectory/trajectory.h"
#include "models/model.h"

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>

namespace ampcheck::engine {

class PrecisionRuntime {
 public:
  virtual ~PrecisionRuntime() = default;
  virtual void begin_step(bool probe) = 0;                 // probe: count this step's saturated / flushed elements
  virtual void end_step() = 0;                             // this step's probe row to the pending rows (on the device)
  virtual void discard() = 0;                              // drops pending rows (a step that raised)
  virtual void flush_into(trajectory::Trajectory& t) = 0;  // SYNC POINT: pending rows to the host
  virtual NamedTensors state() const = 0;                  // for checkpoints
  virtual void load_state(const std::map<std::string, at::Tensor>& tensors, const std::string& path) = 0;
};

// The strategy's runtime, installed in the model (FP8: its matmuls replace the model's Linear layers at the chosen
// sites), fresh (empty amax histories); null where the strategy keeps no per-step state.
std::unique_ptr<PrecisionRuntime> make_precision_runtime(const Strategy& strategy, models::Model& model,
                                                         const at::Device& device);

}  // namespace ampcheck::engine
