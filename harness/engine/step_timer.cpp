#include "engine/step_timer.h"

#include <ATen/DeviceAccelerator.h>

namespace ampcheck::engine {

StepTimer::StepTimer(const at::Device& device)
    : cuda_(device.is_cuda()), index_(device.has_index() ? device.index() : 0) {}

c10::Event& StepTimer::event(size_t i) {
  while (pool_.size() <= i) pool_.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  return pool_[i];
}

void StepTimer::start() {
  if (cuda_) event(open_events_++).record(at::accelerator::getCurrentStream(index_));
  else
    wall_.push_back(std::chrono::steady_clock::now());
}

void StepTimer::stop() { start(); }  // the same mark; starts and stops alternate

std::vector<double> StepTimer::collect() {
  std::vector<double> ms;
  if (cuda_) {
    for (size_t i = 0; i + 1 < open_events_; i += 2) ms.push_back(pool_[i].elapsedTime(pool_[i + 1]));
    open_events_ = 0;
  } else {
    for (size_t i = 0; i + 1 < wall_.size(); i += 2)
      ms.push_back(std::chrono::duration<double, std::milli>(wall_[i + 1] - wall_[i]).count());
    wall_.clear();
  }
  return ms;
}

void StepTimer::discard() {
  open_events_ = 0;
  wall_.clear();
}

}  // namespace ampcheck::engine
