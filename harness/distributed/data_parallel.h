// DataParallel — the trainer's GradientSync for N ranks over a c10d backend (engine/trainer.h says where each call
// happens in a step):
//   all_reduce   the gradients averaged over the ranks in buckets of `bucket_mb`, in `reduce_dtype` (each bucket is
//                cast, divided by the world size — as DDP does, so fp16 sums do not overflow —, summed, cast back),
//                once per optimizer step (after every micro-batch's backward)
//   zero1        each rank's optimizer steps the parameters it owns (index % world_size: round robin), so the
//                optimizer state is sharded; the GradScaler's inf check then covers only the owned grads, and
//                found_inf is all-reduced (MAX) so every rank skips together unless `found_inf_agreement` is off;
//                after the step the owned parameters are gathered to every rank (an all-reduce of a buffer holding
//                each rank's own parameters and zeros elsewhere: exact). The gradient all-reduce stays a full
//                all-reduce (a reduce-scatter would move half the bytes; the numerics are the same).
//   after_step   one small all-reduce of each rank's [loss, parameter checksum, loss scale, skipped] row: the loss
//                is averaged over the ranks (no host sync) and, every `check_every` steps, the rows are compared
//                on the host; the first step where ranks disagree is kept with a message naming what differs.
// Time spent on collectives is accumulated for the report's collective share: on the CPU (Gloo) the wall clock of
// each blocking wait; on a GPU (NCCL) the time between CUDA events recorded on the step's stream before each
// collective and after it waited for NCCL's stream — elapsed GPU time, read without a host sync as they complete.
#pragma once

#include "engine/run_config.h"
#include "engine/trainer.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <c10/core/Event.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::distributed {

struct Consistency {
  int64_t checks = 0;          // steps compared
  int64_t diverged_step = -1;  // first step the ranks disagreed (-1: never)
  std::string message;         // "ranks diverged at step 12: rank 1 skipped, rank 0 stepped"
};

class DataParallel final : public engine::GradientSync {
 public:
  DataParallel(c10::intrusive_ptr<c10d::Backend> backend, const engine::DistributedConfig& cfg, int64_t rank,
               int64_t world_size);

  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_; }
  void all_reduce(const std::vector<at::Tensor>& grads) override;
  bool owns_parameter(size_t index) const override;
  std::function<void(at::Tensor&)> found_inf_reducer() override;
  at::Tensor after_step(int64_t step, const std::vector<at::Tensor>& params, const at::Tensor& loss,
                        const at::Tensor& loss_scale, const at::Tensor& skipped) override;

  const Consistency& consistency() const { return consistency_; }
  double collective_ms() const;  // waits for the collectives' pending events (after the run)
  void barrier();
  void shutdown() { backend_->shutdown(); }  // what destroy_process_group() does (NCCL: communicators released)

 private:
  void reduce(std::vector<at::Tensor>& tensors, c10d::ReduceOp op, const char* what);
  void gather_parameters(const std::vector<at::Tensor>& params);

  c10::intrusive_ptr<c10d::Backend> backend_;
  engine::DistributedConfig cfg_;
  int64_t rank_, world_;
  void resolve_events(bool block) const;

  Consistency consistency_;
  mutable double collective_ms_ = 0;
  mutable std::deque<std::pair<c10::Event, c10::Event>> pending_;  // NCCL: (before, after) each collective
};

}  // namespace ampcheck::distributed
