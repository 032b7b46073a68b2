// EnginePlan — every engine option of a run resolved once, before the run: applied, or refused with the reason.
//
// A scenario (or `--engine fast`, or the benchmark's flags) *requests* engine options: speed paths that must not change
// what a run computes beyond rounding (run_config.h's ENGINE OPTION fields, model.h's). Whether each can apply depends
// on the device, the build (CUDA kernels, cuBLASLt), the strategy (autocast dtype, FP8, master weights), the loop
// (clipping, scaler, planted events) and data parallelism. That decision is made here and nowhere else: the trainer,
// the model (through the resolved models::ModelConfig the plan hands it) and the kernels read the plan, not the
// request, and reports print the plan (what ran), never the request.
//
// Per-call guards stay where a property is only known per call (a tensor's shape for cuBLASLt, a step with a planted
// activation event for the fused LayerNorm); the plan says so in the option's note.
#pragma once

#include "engine/run_config.h"

#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace ampcheck::engine {

// One requested engine option, resolved.
struct OptionDecision {
  std::string option;  // the request's field: "model.gemm_epilogues", "train.cuda_graphs", ...
  std::string label;   // what reports print: "GEMM epilogues"
  bool applied = false;
  std::string note;  // applied: how, where that is worth saying (e.g. "ATen reference: no CUDA kernels"); refused: why
};

struct EnginePlan {
  // ---- what the engine runs (every field resolved; false / stock where not requested or refused)
  models::ModelConfig model;      // the model's engine fields resolved (head_loss, fused_layernorm,
                                  // fused_bias_gelu, gemm_epilogues) and compute_dtype filled in
  bool cuda_graphs = false;       // capture the step (engine/step_graph.h)
  bool fused_grad_check = false;  // grad norm + non-finite flag in one pass (kernels::square_sum_nonfinite)
  // the fused grad check's pass stands for the GradScaler's inf check: one fused-path optimizer holding every
  // parameter, no masters, no gradient sync, no clipping, stepped through the scaler (the trainer still checks per
  // step that no inf check was recorded before it, e.g. by the unscale-each-micro-batch pitfall)
  bool inf_check_from_probe = false;
  bool param_norm_from_optimizer = false;  // the parameter norm from AdamW's pass (train.fused_param_norm)
  bool grad_norm_from_optimizer = false;   // ... and the gradient norm too (no scaler, no clipping)

  // ---- what was requested and what became of it, in a fixed order
  std::vector<OptionDecision> decisions;

  // "stock" when nothing was requested; else the applied options ("fused head; fused grad check") and then each
  // refused one with its reason ("not applied: GEMM epilogues (needs a CUDA device: the run is on cpu)").
  std::string describe() const;
  const OptionDecision* find(const std::string& option) const;
};

// The plan for a run of cfg on device; data_parallel: a gradient sync is attached (harness/distributed).
EnginePlan resolve_engine_plan(const RunConfig& cfg, const at::Device& device, bool data_parallel);

// `--engine fast` (and the benchmark's fast rows): every speed path the engine has, requested in `cfg` — CUDA graphs,
// the fused grad check and parameter norm, and for a GPT or a llama the fused head (unless FP8 computes the head), the
// fused residual LayerNorm, the fused bias-GELU and the GEMM epilogues (the last three the plan refuses for a llama,
// saying why). The one place the expansion is written;
// resolve_engine_plan then applies each or says why not.
void request_fast_engine(RunConfig& cfg);

}  // namespace ampcheck::engine
