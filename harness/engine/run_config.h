// RunConfig — everything that defines one training run, resolved and typed. A scenario file parses into one
// (scenario/), and the engine needs nothing else. Defaults are commented with units and allowed values.
#pragma once

#include "data/corpus.h"
#include "engine/fault_hooks.h"
#include "engine/optimizer.h"
#include "engine/precision.h"
#include "models/model.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampcheck::engine {

struct LoopConfig {
  int64_t steps = 100;                    // optimizer steps
  int64_t micro_batches = 1;              // gradient accumulation: micro-batches per optimizer step
  bool unscale_each_micro_batch = false;  // PITFALL: scaler.unscale_() inside the accumulation loop
  double clip_max_norm = 0.0;             // gradient clipping (2-norm); 0 = off
  bool clip_unscale_first = true;         // false = PITFALL: clip the still-scaled grads
  bool call_update = true;                // false = PITFALL: scaler.update() never called
  // false = PITFALL: gradient accumulation without `loss / micro_batches`: the grads are the SUM over the
  // micro-batches, micro_batches x too large. The recorded loss stays the true mean loss.
  bool divide_loss_by_micro_batches = true;
  // false = PITFALL: `optimizer.step()` called directly instead of `scaler.step(optimizer)`: the still-scaled grads
  // are applied and inf/nan steps are not skipped. With a dynamic scaler, PyTorch's `scaler.update()` then raises
  // AssertionError "No inf checks were recorded prior to update." (unless an unscale_ before clipping recorded
  // them); with call_update: false too, the scaled grads are applied silently.
  bool step_through_scaler = true;
  // false = PITFALL: `scaler.scale(loss); loss.backward()` — the scaled loss is computed and dropped, the plain loss
  // is backpropagated, while unscale_/step/update are kept: the true grads are divided by the scale (and, in fp16,
  // the unscaled backward underflows). Leaving scaler.scale out altogether is refused by PyTorch at the first step
  // ("Attempted step but _scale is None. ..."); this is the form that runs.
  bool scale_loss = true;
  bool zero_grad = true;     // false = PITFALL: optimizer.zero_grad() forgotten: grads add up over steps
  int64_t eval_every = 0;    // steps between eval-loss measurements; 0 = never
  int64_t eval_batches = 4;  // batches per eval
  int64_t log_every = 1;     // trajectory flush (one host sync) every N steps
  // Two optimizers sharing one GradScaler (PyTorch's "multiple models, losses and optimizers" recipe): the
  // transformer blocks (gpt "h.*", llama "model.layers.*") in one AdamW/SGD, everything else (embeddings, final norm)
  // in another, stepped by one scaler and one update().
  bool two_optimizers = false;
  // A second loss, backpropagated through the scaler by its own backward call: aux_loss_weight * sum of the squared
  // parameters of the second group (0 = none).
  double aux_loss_weight = 0.0;
  // The first `delay_steps` optimizer steps are skipped, as a GradScaler skips a step whose grads overflowed (nothing
  // stepped, the step counted as skipped): only the references' `skip` noise run sets it, to measure how far a one-step
  // delay moves this workload's FP32 training (reference/reference_store.h). Not a scenario field.
  int64_t delay_steps = 0;
  // Train only the first `stop_after` of the `steps` steps (0: all): the learning-rate schedule stays `steps` long, so
  // the steps run are those of the whole run — a short localization probe of a long scenario (usecases/localize.h),
  // judged against its reference's first steps. Not a scenario field.
  int64_t stop_after = 0;
  // Per-step digests of every parameter and gradient into the trajectory (Trajectory::digests; a host copy of each
  // per step): `ampcheck validate` sets it for its bitwise comparison. Not a scenario field.
  bool digests = false;
  int64_t resume_at = 0;              // checkpoint at this step and resume from the file in a fresh state (0 = no)
  bool resume_restore_scaler = true;  // false = PITFALL: the resumed run starts a new GradScaler
  // ENGINE OPTION: capture each kind of step (plain, probe) as a CUDA graph after two eager warm-up steps and replay
  // it (engine/step_graph.h); runs that need the host inside a step stay uncaptured and say why.
  bool cuda_graphs = false;
  // ENGINE OPTION: the per-step gradient norm and the GradScaler's inf check from one pass over the grads, and the
  // parameter norm from one more (kernels::square_sum_nonfinite); the scaler's own check is skipped where that pass
  // read exactly the grads it would check (one fused-path optimizer, no master copies, no clipping, no gradient sync).
  bool fused_grad_check = false;
  // ENGINE OPTION: the per-step parameter norm from AdamW's own pass (kernels::adamw_square_sums_: the project's
  // kernel on CUDA, bit for bit ATen's _fused_adamw_, summing the updated parameters' squares as it writes them)
  // instead of a pass of its own, where one AdamW holds every model parameter (no master copies, no gradient sync);
  // the norm is bit for bit the pass's. Where no GradScaler scales the grads and nothing clips them, the gradient norm
  // comes from that pass's read of the grads too (bit for bit fused_grad_check's pass).
  bool fused_param_norm = false;
  int64_t probe_every = 1;  // grad-element fractions and update norm every N steps (0 = never;
                            // they cost a few passes over grads and params: NaN on other steps)
};

// Data-parallel training (harness/distributed/): `distributed:` in a scenario. Ranks are processes; each reads its
// slice of the global batch (data.batch_size is the global batch), and gradients are averaged across ranks at the
// trainer's gradient-sync point.
struct DistributedConfig {
  bool enabled = false;                       // a `distributed:` section is present
  int64_t world_size = 1;                     // ranks (processes) ampcheck starts, or WORLD_SIZE of a torchrun/srun job
  std::string backend = "gloo";               // gloo (CPU) | nccl (CUDA)
  at::ScalarType reduce_dtype = at::kFloat;   // the dtype the gradient all-reduce runs in: fp32 | bf16 | fp16
  std::string sharding = "none";              // none (plain data parallel) | zero1 (optimizer state sharded)
  bool found_inf_agreement = true;            // zero1: all-reduce the GradScaler's found_inf (false = PITFALL)
  std::vector<int64_t> restore_scaler_ranks;  // with train.resume: ranks that restore the scaler (empty = all)
  int64_t check_every = 1;                    // cross-rank consistency check every N steps
  double timeout_s = 300;                     // collective timeout: a hung rank ends the run within about this time
  double bucket_mb = 25;                      // gradient all-reduce bucket size (MiB of the reduce dtype)
};

struct RunConfig {
  std::string name = "unnamed";
  uint64_t seed = 1337;  // model init seed (data has its own)
  models::ModelConfig model;
  data::DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  LoopConfig loop;
  Strategy strategy;
  // Planted events (engine/fault_hooks.h; harness/inject builds them from `inject:` or `validate --plant`): null =
  // none. Shared by copies of the config; replaced, never changed in place (inject::set_injections).
  std::shared_ptr<const FaultHooks> faults;
  DistributedConfig distributed;
  StackFault stack_fault;  // `ampcheck validate --plant`: a planted stack fault (engine/precision.h)
};

}  // namespace ampcheck::engine
