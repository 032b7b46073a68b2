// Precision strategies: how a training run handles number formats, as one typed value — the parameter dtype
// (what `model.half()` changes), the autocast dtype, the loss scaler, fp32 master weights (Apex O2 / Megatron),
// TF32. The named presets are strategy_preset_names(). NumericsGuard applies TF32 / determinism flags for a run and
// restores the previous ones (RAII), and check_supported() says "unsupported here" instead of falling back.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampcheck::engine {

enum class ScalerKind { None, Static, Dynamic };

struct ScalerConfig {
  ScalerKind kind = ScalerKind::None;
  double init_scale = 65536.0;  // dynamic: starting scale; static: the fixed scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// FP8 matmuls (engine/fp8): the Linear layers of the transformer blocks (and optionally the LM head and the
// embeddings) computed by at::_scaled_mm with a per-tensor scale per cast; everything else stays under the strategy's
// bf16 autocast, and the optimizer steps the fp32 parameters (the master weights).
enum class Fp8Scaling {
  Current,  // scale = format max / amax of the tensor being cast (one amax reduction per cast)
  Delayed,  // scale = format max / max of the last `history` amaxes of this cast (Transformer Engine's delayed
            // scaling); the first cast of a tensor uses its own amax
  None,     // PITFALL: cast without a scale (x.to(float8)): small values flush to zero, e4m3 overflows to NaN
};
struct Fp8Config {
  Fp8Scaling scaling = Fp8Scaling::Current;
  bool hybrid = true;             // output gradients in e5m2 (more range, 2 mantissa bits); false: e4m3 throughout
  int64_t history = 16;           // delayed: amax history length (casts of that tensor)
  int64_t margin = 0;             // scale divided by 2^margin (headroom against growth)
  std::string layers = "blocks";  // blocks | blocks+head (also the tied LM head) | all (also the embedding lookups)
  bool emulate_on_cpu = false;    // tests only, not a scenario field: run torch's CPU _scaled_mm (numerics, no speed)

  std::string describe() const;
};
const char* fp8_scaling_name(Fp8Scaling s);  // current | delayed | none

struct Strategy {
  std::string name = "fp32";
  at::ScalarType param_dtype = at::kFloat;  // dtype of the model's parameters
  std::optional<at::ScalarType> autocast;   // autocast compute dtype; nullopt = autocast off
  ScalerConfig scaler;
  bool master_weights = false;   // fp32 master copy stepped by the optimizer
  bool tf32 = false;             // TF32 matmuls / convolutions (CUDA)
  bool deterministic = true;     // deterministic algorithms (fp32 references must be)
  std::optional<Fp8Config> fp8;  // FP8 matmuls (engine/fp8); nullopt = none

  std::string describe() const;  // one line, PyTorch-Python terms
  // Anything other than plain FP32: reduced-precision params, autocast, FP8, master copies or TF32 (what a run that
  // is FP32 bit for bit would claim in vain: verdict::precision_not_in_effect)
  bool reduces_precision() const {
    return param_dtype != at::kFloat || autocast.has_value() || fp8.has_value() || master_weights || tf32;
  }
};

// The presets: fp32, tf32, fp16-pure-scaler, fp16-pure, fp16-autocast, fp16-static, bf16-autocast, bf16-pure,
// fp16-master, fp8 (current scaling, hybrid formats, blocks), fp8-delayed (amax history 16). Throws
// std::invalid_argument naming the known ones.
Strategy strategy_preset(const std::string& name);
std::vector<std::string> strategy_preset_names();

// Throws std::runtime_error("unsupported here: ...") when the device cannot run the strategy (bf16 on a GPU
// without bf16, TF32 below sm80, CUDA requested with no CUDA, FP8 on the CPU or below sm89).
void check_supported(const Strategy& s, const at::Device& device);

// Planted stack faults (`ampcheck validate --plant`): what a misconfigured or faulty stack does without being asked,
// applied after the strategy's numerics are set, so the run's request (and its reports) still say what was asked.
struct StackFault {
  bool tf32 = false;               // TF32 in cuBLAS matmuls and cuDNN convolutions of a run that asked for FP32
  bool nondeterministic = false;   // deterministic algorithms off (cuDNN benchmark on)
  bool reduced_reduction = false;  // cuBLAS fp16 / bf16 GEMMs reduce in reduced precision (split-K)
  bool matmul_bf16 = false;  // float32 matmul precision "medium": bf16 inside FP32 matmuls where the backend has it
  bool any() const { return tf32 || nondeterministic || reduced_reduction || matmul_bf16; }
};

// RAII: TF32 (cuBLAS + cuDNN), deterministic algorithms, cuDNN benchmark/determinism, cuBLAS reduced-precision
// reductions and the float32 matmul precision; the strategy's settings, then a planted StackFault's; restores all on
// exit.
class NumericsGuard {
 public:
  explicit NumericsGuard(const Strategy& s, const StackFault& fault = {});
  ~NumericsGuard();
  NumericsGuard(const NumericsGuard&) = delete;
  NumericsGuard& operator=(const NumericsGuard&) = delete;

 private:
  bool tf32_cublas_, tf32_cudnn_, deterministic_, deterministic_warn_only_, cudnn_benchmark_, cudnn_deterministic_;
  at::CuBLASReductionOption fp16_reduction_, bf16_reduction_;
  at::Float32MatmulPrecision matmul_precision_;
};

const char* dtype_name(at::ScalarType t);          // "fp32", "fp16", "bf16"
at::ScalarType parse_dtype(const std::string& s);  // fp32|float32, fp16|float16|half, bf16|bfloat16

}  // namespace ampcheck::engine
