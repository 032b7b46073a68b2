// Running one scenario end to end: build the trainer on the resolved device, train, classify the outcome (the
// trajectory file's provenance: run/provenance.h; a progress printer: run/progress.h). Shared by the CLI and the tests.
#pragma once

#include "engine/device.h"
#include "engine/trainer.h"
#include "scenario/scenario.h"

#include <string>

namespace ampcheck::run {

// Step times of a trajectory, warm-up excluded: the first max(2, 10%) steps are dropped (at least one step is kept).
struct StepTiming {
  std::string method;  // cuda-events | wall-clock (engine/step_timer.h)
  int64_t warmup_steps = 0, timed_steps = 0;
  double median_ms = NAN, p10_ms = NAN, p90_ms = NAN;
};
StepTiming step_timing(const trajectory::Trajectory& t, const std::string& method);

// The dtype a strategy's matmuls run in (what its throughput should be compared with): autocast dtype, else the
// parameter dtype, with fp32 reported as tf32 when TF32 is on.
std::string compute_dtype(const engine::Strategy& s);

// A data-parallel run (harness/distributed/): what the ranks did, for the reports.
struct DistributedSummary {
  int64_t world_size = 0;                               // 0: not a data-parallel run
  std::string backend, sharding, reduce_dtype, launch;  // launch: "ampcheck" (started its ranks) | "environment"
  std::vector<double> rank_median_step_ms;              // per rank, after warm-up
  std::vector<double> rank_collective_share;            // per rank: time waiting on collectives / total step time
  int64_t consistency_checks = 0;
  int64_t diverged_step = -1;  // first step the ranks disagreed (-1: never)
  std::string consistency;     // the message ("ranks diverged at step 12: rank 1 skipped, rank 0 stepped")
  std::string rank_files;      // the directory with every rank's trajectory
};

struct ScenarioResult {
  std::string name;
  std::string device_class;
  engine::RunOutcome outcome;
  trajectory::Trajectory trajectory;
  std::string model_description;
  double first_loss = NAN, final_loss = NAN, min_loss = NAN;
  std::string workload;       // what throughput is comparable across: "gpt nano, batch 8 x 64"
  std::string compute_dtype;  // the matmul dtype of the strategy: fp32 | tf32 | fp16 | bf16
  StepTiming timing;          // per-step times after warm-up
  double tokens_per_step = 0, samples_per_step = 0;
  double flops_per_step = 0;        // model FLOPs of one training step (Model::training_flops_per_token)
  int64_t peak_memory_bytes = 0;    // CUDA: peak allocated by the caching allocator; CPU: peak RSS of the process
  int64_t peak_reserved_bytes = 0;  // CUDA: peak reserved; CPU: peak RSS
  // the engine path it ran (EnginePlan::describe): "stock", or the options applied ("fused head; cuda graphs
  // (captured: 1 graph(s), 58 of 60 steps replayed)") then those refused ("not applied: GEMM epilogues (needs a CUDA
  // device: the run is on cpu)"); engine_plan: each requested option, applied or not, with its note / reason
  std::string engine;
  std::vector<engine::OptionDecision> engine_plan;
  DistributedSummary distributed;
};

// Trains the scenario in this process on `device` (resolved by the caller: engine::resolve_device): the engine's run
// of one scenario, one rank's when a data-parallel launcher calls it (usecases::train_single_or_data_parallel picks
// between this and the launcher). steps_override > 0 replaces train.steps. sync: a data-parallel rank's GradientSync
// (harness/distributed/ passes it; nullptr: one process).
ScenarioResult train_scenario(const scenario::Scenario& sc, const at::Device& device, int64_t steps_override = 0,
                              engine::Trainer::ProgressFn progress = nullptr, engine::GradientSync* sync = nullptr);
// The same on device_spec: auto | cpu | cuda (overrides the scenario's device unless empty), resolved here.
ScenarioResult train_scenario(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps_override = 0,
                              engine::Trainer::ProgressFn progress = nullptr, engine::GradientSync* sync = nullptr);

}  // namespace ampcheck::run
