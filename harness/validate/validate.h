// `ampcheck validate`: does this GPU / driver / library stack compute what a known-good one computed? The pieces
// the command (usecases/validate_stack.cpp) puts together, each testable on its own:
//   - golden trajectories: a validation scenario's own run (not its FP32 reference) with per-step digests of every
//     parameter and gradient, kept per *golden class* — the device class, and for CPUs the ATen kernel capability
//     (the CPU's FP32 bits change with it): references/validate/<golden class>/<scenario>.h5;
//   - the stack fingerprint compared key by key (which differences can change bits, which cannot);
//   - the bitwise comparison: identical, or the first step, column and tensor that differ;
//   - the replay of a differing step from a checkpoint, several times: a difference the replays do not reproduce (or
//     that varies between them) is a transient fault, one they reproduce a persistent difference;
//   - planted faults (--plant) that prove the checks: a bit flip (persistent, or transient: the run only, not its
//     replays) and stack faults (TF32, non-deterministic algorithms, reduced-precision reductions, bf16 matmuls).
#pragma once

#include "engine/run_config.h"
#include "inject/injection.h"
#include "trajectory/trajectory.h"
#include "validate/fleet_status.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::validate {

using Fingerprint = std::vector<std::pair<std::string, std::string>>;  // engine::stack_fingerprint

// Every validate command (a lone process or a rank of a fleet) starts here: one intra-op thread (a golden then does
// not depend on the machine's core count: a different split of a reduction over threads changes its bits; the
// validation scenarios are small), and the cuBLAS workspace every deterministic run sets before cuBLAS's first use
// (engine/precision.cpp), set first: each scenario's fingerprint, taken before it trains, then reads what cuBLAS will
// use, whatever ran before it.
void settle_process();

// ---- golden classes and paths

// "cuda-sm90" for a GPU (its device class), "cpu-avx512" for a CPU (device class + ATen's CPU capability).
std::string golden_class(const Fingerprint& fp);
// <root>/validate/<golden class>/<scenario name>.h5
std::string golden_path(const std::string& root, const std::string& golden_class, const std::string& scenario);
// The classes to fall back on, nearest first, among `available` (the other stored classes): for a GPU the same
// architecture family (cuda-sm9x for cuda-sm90) by distance, then other GPUs, then CPUs; for a CPU other CPU classes,
// then GPUs; equally far ones the older architecture first. `wanted` itself is not listed.
std::vector<std::string> nearest_classes(const std::string& wanted, const std::vector<std::string>& available);

// ---- fingerprints

// Whether a difference in this fingerprint key can change the bits a run computes (torch, CUDA runtime, cuBLAS,
// cuDNN, device, compute capability, CPU model / ISA / ATen capability, threads, the determinism, TF32, reduction and
// matmul precision flags) or not (drivers, NCCL and its NCCL_* settings in a one-process run, device memory; for a GPU
// run the CPU model and its extensions: only ATen's CPU capability reaches it, through the initial weights' sampling).
bool changes_bits(const std::string& key, bool cuda);
// "env_MKL_CBWR": a numerics-changing environment setting (engine::numerics_environment); a difference in one is
// configuration drift, not a fault of the machine.
bool is_environment_key(const std::string& key);
struct StackDifference {
  std::string key, golden, here;
  bool changes_bits = false;
};
// The keys whose values differ; `golden` from a file's `stack_<key>` attributes. A key the golden lacks (recorded by
// an older ampcheck) counts as a difference.
std::vector<StackDifference> stack_differences(const std::map<std::string, std::string>& golden_attributes,
                                               const Fingerprint& here);
std::string describe(const std::vector<StackDifference>& diffs);  // "cpu_model: AMD EPYC 7B13 -> Intel Xeon; ..."

// ---- the bitwise comparison

struct BitwiseComparison {
  bool identical = false;
  int64_t step = -1;   // the first step with a difference (-1: identical)
  std::string column;  // the first trajectory column that differs at that step ("" if only tensors did)
  std::string tensor;  // the first tensor that differs there: "gradient of wte", "parameter h.0.mlp.c_fc.weight"
  int64_t tensors_differing = 0;  // at that step, parameters + gradients whose digests differ
  std::string message;  // "identical: 40 steps, every column and 38 tensors' digests" | "first difference: step 5, ..."
};
// Compares the recorded columns bit for bit (a NaN equals a NaN with the same bits) and, where both have them, the
// digests: per step, the loss (computed first), then the gradients, then the parameters, then the other columns.
BitwiseComparison compare_bitwise(const trajectory::Trajectory& run, const trajectory::Trajectory& golden);

// ---- replay of a differing step

struct Replay {
  ReplayKind kind = ReplayKind::Persistent;  // transient | persistent (fleet_status.h)
  int64_t step = -1;
  std::vector<uint64_t> digests;  // one per replay: the step's combined digest (every parameter and gradient)
  uint64_t run_digest = 0, golden_digest = 0;
  std::string message;
};
uint64_t step_digest(const trajectory::StepDigests& d, int64_t step);  // every parameter and gradient of one step
// Trains `cfg` (digests on) to `step`, checkpoints into `scratch_dir`, then runs `step` `repeats` times from the
// checkpoint and compares each replay's digest with the run's and the golden's at that step. `against` names the
// golden in the message ("golden"; the fleet's vote: "majority").
Replay replay_step(engine::RunConfig cfg, const at::Device& device, int64_t step, const trajectory::Trajectory& run,
                   const trajectory::Trajectory& golden, int repeats, const std::string& scratch_dir,
                   const std::string& against = "golden");

// ---- planted faults

struct Plant {
  std::string text;  // as given
  engine::StackFault stack;
  std::vector<inject::InjectionConfig> injections;  // a bit flip
  bool transient = false;                           // the run only: its replays run without it
};
// "bitflip:<param|grad>:<glob>:<element>:<bit>@<step>[:transient]", "tf32", "nondeterministic", "reduced-reduction",
// "matmul-bf16"; throws std::invalid_argument naming what was expected.
Plant parse_plant(const std::string& text);
// What a plant is checked against before any training: each parameter's name, elements and bits per element (its
// value's and its gradient's: the strategy's parameter dtype).
struct ParameterShape {
  std::string name;
  int64_t numel = 0;
  int64_t bits = 32;
};
// The scenario model's parameters (the model is built once, on the CPU; nothing trains).
std::vector<ParameterShape> parameter_shapes(const engine::RunConfig& run);
// Throws std::invalid_argument naming the plant and what was expected when it cannot act: its glob matches no
// parameter, its element is past the first match's size, its bit past the element's width, its step past the run.
void check_plant(const Plant& plant, const std::vector<ParameterShape>& params, int64_t steps);
// The run's configuration with the plants applied; `replay` leaves transient ones out.
engine::RunConfig planted(engine::RunConfig cfg, const std::vector<Plant>& plants, bool replay);

}  // namespace ampcheck::validate
