// Trainer — the training engine. One optimizer step reads as named phases (step_on_device):
//   zero_grad -> [forward -> backward] x micro-batches -> planted grad events -> gradient sync -> probes
//   -> master grads -> unscale + clip -> step -> update -> master copy-back -> after_step (data parallel) -> row
// Each phase's machinery lives in its own unit: the engine options resolved once (engine_plan.h), the probes and the
// trajectory row (step_probes.h), fp32 master weights (master_weights.h), FP8's per-step state (precision_runtime.h),
// checkpoints (checkpoint.h), the data-parallel side (gradient_sync.h). With train.cuda_graphs the phases are
// captured once per kind of step and replayed (step_graph.h).
// Precision handling (casts, autocast, loss scaling, master weights) is the strategy's, applied here, never in models.
#pragma once

#include "data/corpus.h"
#include "engine/checkpoint.h"
#include "engine/engine_plan.h"
#include "engine/fault_hooks.h"
#include "engine/first_nonfinite.h"
#include "engine/gradient_sync.h"
#include "engine/master_weights.h"
#include "engine/optimizer.h"
#include "engine/precision.h"
#include "engine/precision_runtime.h"
#include "engine/run_randomness.h"
#include "engine/run_config.h"
#include "engine/run_outcome.h"
#include "engine/step_graph.h"
#include "engine/step_probes.h"
#include "engine/step_timer.h"
#include "trajectory/run_status.h"
#include "trajectory/trajectory.h"
#include "models/model.h"

#include <ampcheck/amp/grad_scaler.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ampcheck::engine {

class Trainer {
 public:
  // sync: the data-parallel side (nullptr: one process); it must outlive the trainer.
  Trainer(RunConfig cfg, at::Device device, GradientSync* sync = nullptr);
  ~Trainer();

  // Runs steps [start_step(), cfg.loop.steps) (the first loop.stop_after where set). Exceptions from the step (e.g.
  // GradScaler's) end the run as Error.
  RunOutcome run();
  // Runs until step `until` (exclusive); exceptions propagate.
  void run_until(int64_t until);
  // One optimizer step; exceptions propagate.
  void train_step(int64_t step);
  double evaluate();  // mean eval loss over cfg.loop.eval_batches (under the strategy's autocast)

  void save_checkpoint(const std::string& path) const;
  // restore_scaler = false reproduces the "resume without the scaler state" pitfall.
  void load_checkpoint(const std::string& path, bool restore_scaler = true);
  // What a job restart does: checkpoint to a temporary file, then reload model, masters and optimizer from it and
  // start a fresh GradScaler (restored from the file when restore_scaler).
  void restart_from_checkpoint(bool restore_scaler);

  int64_t next_step() const { return next_step_; }
  const RunConfig& config() const { return cfg_; }
  // the engine options as resolved for this run (train.cuda_graphs' entry says how many steps were replayed)
  EnginePlan plan() const;
  models::Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizers_.front(); }
  const std::vector<std::unique_ptr<Optimizer>>& optimizers() const { return optimizers_; }
  amp::GradScaler* scaler() { return scaler_.get(); }
  const trajectory::Trajectory& trajectory() const { return trajectory_; }
  const at::Device& device() const { return device_; }
  // Called after every flush with the last recorded step (0-based) and the trajectory so far.
  using ProgressFn = std::function<void(int64_t step, const trajectory::Trajectory& trajectory)>;
  void set_progress(ProgressFn fn) { progress_ = std::move(fn); }
  void flush();  // SYNC POINT: copies pending device-side trajectory rows to the host
  // What backward will bring to the model's loss at `step` (undefined: 1): the GradScaler's scale when the loss is
  // scaled, times planted loss-scale factors, ÷ micro-batches where the loss is divided. The fused LM head forms its
  // gradient in the forward at this scale (ForwardOptions::loss_grad_scale).
  at::Tensor loss_grad_scale(int64_t step) const;
  // train.cuda_graphs: "" when not asked for; "captured: ..." with the replay count; "uncaptured: <why>".
  std::string cuda_graphs_status() const;

 private:
  // construction
  void build_model();
  void build_data();
  void build_optimizers();
  std::unique_ptr<amp::GradScaler> make_scaler() const;
  // the step's phases
  at::Tensor step_on_device(int64_t step, bool full_probe, const std::vector<data::Batch>& batches);      // -> row
  at::Tensor step_through_graph(int64_t step, bool full_probe, const std::vector<data::Batch>& batches);  // -> row
  void zero_grads();
  at::Tensor forward_backward(int64_t step, const std::vector<data::Batch>& batches);  // summed unscaled loss
  at::Tensor backward_target(const at::Tensor& loss);  // scaler.scale(loss) (or the loss: no scaler / pitfall)
  void unscale_and_clip();
  at::Tensor optimizer_step();  // scaler.step or opt.step; returns the skipped flag
  at::Tensor delayed_step();    // a step LoopConfig::delay_steps skips (skipped flag 1)
  void update_scale();          // scaler.update() / update(S)
  void record_digests();        // LoopConfig::digests: this step's tensor digests
  // helpers
  // the GradScaler's scale tensor (copy: a copy, which the scaler's update leaves as it is), or a fresh 1
  at::Tensor scale_or_one(bool copy = false) const;
  bool inf_check_from_probe() const;  // this step: the probe's pass stands for the scaler's check
  // The parameters the optimizer steps: the fp32 masters where the strategy keeps them (their update is the
  // optimizer's; the fp16 copy rounds an update below its ulp to 0 or a whole ulp), else the model's. The update and
  // parameter norms are measured on these.
  std::vector<at::Tensor> stepped_parameters() const;
  std::vector<at::Tensor> model_grads() const;
  TrainingState state();
  void raised(RunOutcome& out, const std::string& error);  // ends a run on an exception

  RunConfig cfg_;
  at::Device device_;
  EnginePlan plan_;  // the engine options, resolved once
  std::unique_ptr<NumericsGuard> numerics_;
  std::unique_ptr<RunRandomness> randomness_;  // the default generators, seeded per step (dropout)
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<data::BatchSampler> sampler_;
  MasterWeights masters_;                               // fp32 master weights (empty unless strategy.master_weights)
  std::vector<std::unique_ptr<Optimizer>> optimizers_;  // one, or two sharing the scaler (loop.two_optimizers)
  std::vector<size_t> second_group_;                    // model parameter indices of the second group
  std::unique_ptr<amp::GradScaler> scaler_;
  std::unique_ptr<PrecisionRuntime> precision_;  // FP8's per-step state (fp8 strategies), else null
  std::shared_ptr<const FaultHooks> faults_;     // this rank's planted events (null: none)
  GradientSync* grad_sync_ = nullptr;
  ProgressFn progress_;
  StepProbes probes_;

  trajectory::Trajectory trajectory_;
  std::vector<at::Tensor> pending_rows_;  // (kNumDeviceColumns,) fp64 per step, on device
  std::vector<std::array<double, trajectory::kNumColumns>> pending_host_;
  FirstNonfinite first_nonfinite_;      // which module went non-finite first (the pending steps' watches until flushed)
  StepTimer timer_;                     // per-step time (CUDA events / wall clock)
  std::unique_ptr<StepGraphs> graphs_;  // train.cuda_graphs where the plan applies it, else null
  std::vector<data::Batch> static_batches_;  // the captured step's inputs (graphs only)
  at::Tensor static_rows_[2];                // the captured steps' rows: plain step, probe step
  int64_t next_step_ = 0;
};

}  // namespace ampcheck::engine
