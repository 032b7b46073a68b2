// Per-step timing without a host-device sync per step. On CUDA a pair of timing events brackets each step on the
// current stream and the elapsed times are read after the next synchronisation (the trajectory flush); on the CPU,
// where ATen's ops return when their work is done, the wall clock brackets the step.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <chrono>
#include <cstddef>
#include <vector>

namespace ampcheck::engine {

class StepTimer {
 public:
  explicit StepTimer(const at::Device& device);
  void start();  // before the step's first op
  void stop();   // after its last
  // The milliseconds of every step stopped since the last collect(), oldest first. Call after the device has been
  // synchronised (CUDA events must have completed).
  std::vector<double> collect();
  void discard();  // drop the open steps (a run that raised)
  const char* method() const { return cuda_ ? "cuda-events" : "wall-clock"; }

 private:
  c10::Event& event(size_t i);  // the i-th pooled event, created on first use

  bool cuda_;
  c10::DeviceIndex index_;
  std::vector<c10::Event> pool_;  // CUDA: 2 per open step, reused
  size_t open_events_ = 0;
  std::vector<std::chrono::steady_clock::time_point> wall_;  // CPU: start, stop per open step
};

}  // namespace ampcheck::engine
