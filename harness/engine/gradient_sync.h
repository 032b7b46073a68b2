// GradientSync — the data-parallel side of a training step, as the trainer sees it (harness/distributed/ implements it;
// a single process has none). The trainer calls it at fixed points and knows nothing of ranks or collectives:
//   construction: data_shard (which slice of the global batch), owns_parameter (ZeRO-1: what this rank's
//                 optimizer steps), found_inf_reducer (ZeRO-1: GradScaler's inf check agreed across ranks)
//   grad_sync:    all_reduce — after backward (and planted events), before probes, unscale, clip and step
//   after_step:   all-gather a sharded optimizer's parameters, the cross-rank consistency check; returns the loss
//                 averaged over the ranks (what the trajectory records)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ampcheck::engine {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual void all_reduce(const std::vector<at::Tensor>& grads) = 0;
  virtual bool owns_parameter(size_t /*index*/) const { return true; }
  virtual std::function<void(at::Tensor&)> found_inf_reducer() { return nullptr; }
  virtual at::Tensor after_step(int64_t step, const std::vector<at::Tensor>& params, const at::Tensor& loss,
                                const at::Tensor& loss_scale, const at::Tensor& skipped) = 0;
};

}  // namespace ampcheck::engine
