// RunRandomness (run_randomness.h): the default generators held, seeded per step, restored.
#include "engine/run_randomness.h"

#include <ATen/Context.h>

#include <mutex>

namespace ampcheck::engine {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t step_seed(uint64_t seed, int64_t step, int64_t rank) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(rank));
}

RunRandomness::RunRandomness(uint64_t seed, int64_t rank, const at::Device& device) : seed_(seed), rank_(rank) {
  generators_.push_back(at::globalContext().defaultGenerator(at::Device(at::kCPU)));
  if (device.is_cuda())
    generators_.push_back(
        at::globalContext().defaultGenerator(at::Device(at::kCUDA, device.has_index() ? device.index() : 0)));
  for (auto& g : generators_) {
    std::lock_guard<std::mutex> lock(g.mutex());
    saved_states_.push_back(g.get_state());
  }
}

RunRandomness::~RunRandomness() {
  for (size_t i = 0; i < generators_.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators_[i].mutex());
    generators_[i].set_state(saved_states_[i]);
  }
}

void RunRandomness::seed_step(int64_t step) {
  const uint64_t s = step_seed(seed_, step, rank_);
  for (auto& g : generators_) {
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);
  }
}

}  // namespace ampcheck::engine
