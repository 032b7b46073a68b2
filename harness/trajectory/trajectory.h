// Trajectory — the per-step record of a run (docs/TRAJECTORY_FORMAT.md): one row per optimizer step, every value a
// double (NaN where not measured, e.g. eval_loss between evals). Column order is the file format's: append only.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::trajectory {

enum Column : int {
  kLoss = 0,       // training loss, unscaled, averaged over micro-batches
  kGradNorm,       // true 2-norm of the gradient (scaled grads' norm / loss scale), before clipping
  kParamNorm,      // 2-norm of the model's parameters after the step
  kUpdateNorm,     // 2-norm of (params after - params before) the step
  kLossScale,      // the loss scale used for this step's backward (1 without a scaler)
  kSkipped,        // 1 if the optimizer step was skipped (inf/nan found), else 0
  kFracZero,       // fraction of gradient elements == 0 (as produced by backward, before unscaling)
  kFracSubnormal,  // fraction of non-zero gradient elements below the smallest normal of the grad dtype
  kFracNonfinite,  // fraction of gradient elements that are inf or nan
  kLr,             // learning rate of this step
  kStepTimeMs,     // time of this step: CUDA events around it on the GPU, the wall clock on the CPU (StepTimer)
  kEvalLoss,       // eval loss after this step, NaN if not evaluated
  kNumColumns
};
// The columns computed on the device and copied to the host in one transfer per flush.
constexpr int kNumDeviceColumns = kFracNonfinite + 1;

const char* column_name(int c);  // "loss", "grad_norm", ...

// FP8 casts of an fp8 strategy (engine/fp8): per step and per cast ("h.3.mlp.c_fc.x", ".w", ".grad"), the fraction
// of the tensor's elements saturated (at or past the format's max) and flushed to zero by the cast, and the scale
// used (the largest of the step's micro-batches). Fractions are NaN on steps not probed (loop.probe_every).
struct Fp8Probes {
  std::vector<std::string> casts;
  std::vector<std::vector<double>> saturated, flushed, scale;  // [step][cast]
  bool empty() const { return casts.empty(); }
};

// Per step, the digest (engine/digest.h) of every parameter after the step and of its gradient as the step used it
// (LoopConfig::digests; `ampcheck validate`'s bitwise comparison names the first tensor that differs). Empty unless
// asked for.
struct StepDigests {
  std::vector<std::string> tensors;                  // parameter names, in the model's order
  std::vector<std::vector<uint64_t>> params, grads;  // [step][tensor]
  bool empty() const { return tensors.empty(); }
};

struct Trajectory {
  std::vector<std::array<double, kNumColumns>> rows;
  StepDigests digests;              // empty unless LoopConfig::digests
  Fp8Probes fp8;                    // empty unless the strategy has FP8 matmuls
  std::vector<std::string> events;  // "step 12: injected inf into h.0.attn.c_attn.weight grad", ...

  int64_t size() const { return static_cast<int64_t>(rows.size()); }
  std::vector<double> column(int c) const;
  bool any_nonfinite_loss() const;
  int64_t skipped_steps() const;
};

// A trajectory with a name: a reference's noise runs ("ulp+1", "ulp-1", "seed", "order", "skip").
struct LabelledTrajectory {
  std::string label;
  Trajectory trajectory;
};

}  // namespace ampcheck::trajectory
