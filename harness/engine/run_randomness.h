// The run's random draws that no generator of its own covers: dropout masks (at::dropout,
// scaled_dot_product_attention's dropout_p) draw from ATen's default generators (CPU and CUDA), which PyTorch seeds
// once per process. A run holds them for its lifetime through RunRandomness: their state is saved, they are seeded at
// the start of every optimizer step from (run seed, step, rank) — so a step's masks depend on nothing that ran before
// it: a scenario run twice, a resumed run and validate's replay of one step draw the same masks — and their state is
// restored when the run ends (RAII: the process's global generators are as the run found them). Model init and data
// have seeded generators of their own.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::engine {

// The seed of step `step` of rank `rank` in a run seeded `seed` (SplitMix64 over the three): distinct per step and
// rank.
uint64_t step_seed(uint64_t seed, int64_t step, int64_t rank);

class RunRandomness {
 public:
  // device: the run's device (its CUDA default generator is held too where it is a GPU)
  RunRandomness(uint64_t seed, int64_t rank, const at::Device& device);
  ~RunRandomness();  // restores the generators' state from before the run
  RunRandomness(const RunRandomness&) = delete;
  RunRandomness& operator=(const RunRandomness&) = delete;

  // Seeds the held generators for step `step`. Host-only: call it outside a CUDA graph capture (the trainer does,
  // before the step's replay; a replay reads the generator's seed and offset when it starts).
  void seed_step(int64_t step);

 private:
  uint64_t seed_;
  int64_t rank_;
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> saved_states_;
};

}  // namespace ampcheck::engine
