// StepGraphs — the engine option `train.cuda_graphs`: a training step's device work captured once as a CUDA graph
// and replayed every step after, so the host launches one graph instead of ~1000 kernels and the GPU never waits on
// it. The trainer hands over the step's device work as a body; StepGraphs runs it eagerly for the warm-up steps
// (cuBLAS workspaces, optimizer and scaler state, autograd's first pass), then captures it on a side stream — one graph
// per kind of step (a probe step computes more), captured at its first occurrence, all in one memory pool — and
// replays it. A capture records without running, so the step it was taken on is then replayed like any other.
//
// What a body must be: device work only — no host sync, no host decision that can change from step to step, inputs
// read from tensors that outlive the capture (the trainer's static batch buffers, the learning-rate tensor), results
// written into such tensors. Parameters, optimizer moments, the GradScaler's scale and growth tracker are updated in
// place, so they are such tensors already. A run whose step needs the host (why_not) runs uncaptured and says why.
#pragma once

#include "engine/run_config.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

namespace ampcheck::engine {

class StepGraphs {
 public:
  // Why this run's steps cannot be captured ("" = they can). has_sync: a data-parallel GradientSync is attached.
  static std::string why_not(const RunConfig& cfg, const at::Device& device, bool has_sync);

  explicit StepGraphs(int64_t warmup_steps = 2);
  ~StepGraphs();

  // Runs the body for a step of kind `key`: eagerly for the first warmup_steps calls (whatever their kind), then
  // captured at the first call of each kind and replayed. Returns true when the body ran as a graph replay.
  bool run(int key, const std::function<void()>& body);
  int64_t replays() const { return replays_; }
  int64_t graphs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t warmup_steps_;
  int64_t eager_runs_ = 0;
  int64_t replays_ = 0;
};

}  // namespace ampcheck::engine
