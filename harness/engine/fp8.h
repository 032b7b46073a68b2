// FP8 matmuls for the fp8 strategies: a models::MatmulOverride that computes the chosen sites' Linear layers through
// at::_scaled_mm — activations and weights cast to e4m3, the output gradient to e5m2 (hybrid) or e4m3 — each cast
// with its own per-tensor scale (current amax, amax history, or none: precision.h's Fp8Config), and probes every
// cast: the fraction of elements saturated (at the format's max, or past it without a scale), the fraction flushed to
// zero, and the scale. Nothing here syncs with the host: probes stay on the device until the trainer's flush.
//
// One cast = one tensor role at one site: "<site>.x" (input activation), "<site>.w" (weight), "<site>.grad" (the
// gradient of the site's output, in backward). The forward keeps x and w in FP8 for backward (as Transformer Engine
// does): dgrad = grad8 @ w8, wgrad = grad8^T @ x8. Forward matmuls use fast accumulation, backward ones do not
// (Transformer Engine's and torchao's choice). Output dtype bf16; the bias is added in bf16 afterwards.
#pragma once

#include "engine/precision.h"
#include "trajectory/trajectory.h"
#include "models/model.h"

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::engine {

// The formats' limits (OCP FP8: e4m3fn has no inf, its max is 448; e5m2 is IEEE-like, max 57344).
struct Fp8Format {
  at::ScalarType dtype;
  double max;                 // largest finite value
  double overflow;            // max + half its ulp: from here a plain cast overflows (NaN / inf) and a saturating cast
                              // clips — the elements counted as saturated (464 for e4m3, 61440 for e5m2)
  double smallest_subnormal;  // 2^-9 (e4m3), 2^-16 (e5m2); values at or below half of it round to zero
  const char* name;
};
Fp8Format fp8_format(at::ScalarType dtype);

class Fp8Matmuls final : public models::MatmulOverride {
 public:
  // sites: the model's matmul_sites(); cfg.layers picks which go to FP8 (blocks: "h.*"; blocks+head: also
  // "lm_head"; all: also the "wte"/"wpe" lookups, through an FP8 round trip of the table).
  Fp8Matmuls(const Fp8Config& cfg, const std::vector<std::string>& sites, const at::Device& device);

  at::Tensor linear(int site, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) override;
  at::Tensor embedding(int site, const at::Tensor& w, const at::Tensor& indices) override;

  // Step bracket: probe = count saturated / flushed elements this step (else only the scales are recorded).
  void begin_step(bool probe);
  void end_step();  // appends this step's (casts x 3) row to the pending device rows
  void discard();   // drops pending rows (a step that raised)
  // SYNC POINT (called from the trainer's flush): pending rows to the host, appended to `out`.
  void flush_into(trajectory::Fp8Probes& out);
  const std::vector<std::string>& cast_names() const { return cast_names_; }
  // Delayed scaling's state for checkpoints: "fp8/history/<cast>" (history,) fp32 and "fp8/filled" (casts,) int64;
  // empty for the other recipes. load_state throws naming what does not match.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  void load_state(const std::map<std::string, at::Tensor>& tensors, const std::string& path);

  // One quantisation: the FP8 tensor and the inverse scale (what _scaled_mm multiplies back), probes recorded in the
  // cast's slot of this step's row. Public for the tests.
  struct Quantized {
    at::Tensor data;       // FP8, same shape as the input
    at::Tensor inv_scale;  // 0-dim fp32
  };
  Quantized quantize(int cast, const at::Tensor& x);
  int cast_index(int site, int role) const { return site_cast_[site] < 0 ? -1 : site_cast_[site] + role; }
  enum Role { kInput = 0, kWeight = 1, kGrad = 2 };

 private:
  struct Cast {
    Fp8Format format;
    at::Tensor history;  // delayed: (history,) fp32 amaxes
    int64_t filled = 0;  // casts recorded in the history
  };
  Fp8Config cfg_;
  at::Device device_;
  std::vector<int> site_cast_;  // per site: index of its first cast (x; w = +1, grad = +2), -1 = not FP8
  std::vector<std::string> cast_names_;
  std::vector<Cast> casts_;
  at::Tensor step_row_;  // (casts, 3) fp32: saturated, flushed, scale of this step
  bool probe_ = false;
  std::vector<at::Tensor> pending_;
};

}  // namespace ampcheck::engine
