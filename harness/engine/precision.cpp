// Strategy presets, support checks and the numerics guard.
#include "engine/precision.h"

#include "engine/device.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace ampcheck::engine {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "fp32";
    case at::kHalf:
      return "fp16";
    case at::kBFloat16:
      return "bf16";
    case at::kDouble:
      return "fp64";
    default:
      return c10::toString(t);
  }
}

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32") return at::kFloat;
  if (s == "fp16" || s == "float16" || s == "half") return at::kHalf;
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  throw std::invalid_argument("unknown dtype '" + s + "' (expected fp32, fp16 or bf16)");
}

const char* fp8_scaling_name(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::Current:
      return "current";
    case Fp8Scaling::Delayed:
      return "delayed";
    case Fp8Scaling::None:
      return "none";
  }
  return "?";
}

std::string Fp8Config::describe() const {
  std::ostringstream os;
  os << "FP8 matmuls (" << layers << "): e4m3 activations/weights, " << (hybrid ? "e5m2" : "e4m3") << " grads, ";
  switch (scaling) {
    case Fp8Scaling::Current:
      os << "scale from the current amax";
      break;
    case Fp8Scaling::Delayed:
      os << "delayed scaling (amax history " << history << ")";
      break;
    case Fp8Scaling::None:
      os << "NO scaling";
      break;
  }
  if (margin != 0) os << ", margin " << margin;
  return os.str();
}

std::string Strategy::describe() const {
  std::ostringstream os;
  os << "params " << dtype_name(param_dtype);
  if (param_dtype != at::kFloat) os << " (model." << (param_dtype == at::kHalf ? "half()" : "to(bfloat16)") << ")";
  if (autocast) os << ", autocast(" << dtype_name(*autocast) << ")";
  switch (scaler.kind) {
    case ScalerKind::None:
      break;
    case ScalerKind::Static:
      os << ", static loss scale " << scaler.init_scale;
      break;
    case ScalerKind::Dynamic:
      os << ", GradScaler(init_scale=" << scaler.init_scale << ")";
      break;
  }
  if (master_weights) os << ", fp32 master weights";
  if (fp8) os << ", " << fp8->describe();
  os << (tf32 ? ", TF32 on" : ", TF32 off");
  if (deterministic) os << ", deterministic";
  return os.str();
}

namespace {
struct Preset {
  const char* name;
  at::ScalarType param;
  std::optional<at::ScalarType> autocast;
  ScalerKind scaler;
  bool master;
  bool tf32;
};
const Preset kPresets[] = {
    {"fp32", at::kFloat, std::nullopt, ScalerKind::None, false, false},
    {"tf32", at::kFloat, std::nullopt, ScalerKind::None, false, true},
    {"fp16-pure-scaler", at::kHalf, std::nullopt, ScalerKind::Dynamic, false, false},  // model.half() + GradScaler
    {"fp16-pure", at::kHalf, std::nullopt, ScalerKind::None, false, false},            // model.half() alone
    {"fp16-autocast", at::kFloat, at::kHalf, ScalerKind::Dynamic, false, false},       // autocast + GradScaler
    {"fp16-static", at::kFloat, at::kHalf, ScalerKind::Static, false, false},          // autocast + fixed scale
    {"bf16-autocast", at::kFloat, at::kBFloat16, ScalerKind::None, false, false},
    {"bf16-pure", at::kBFloat16, std::nullopt, ScalerKind::None, false, false},  // model.to(bfloat16)
    {"fp16-master", at::kHalf, std::nullopt, ScalerKind::Dynamic, true, false},  // Apex O2 style
    {"fp8", at::kFloat, at::kBFloat16, ScalerKind::None, false, false},          // + FP8 matmuls (below)
    {"fp8-delayed", at::kFloat, at::kBFloat16, ScalerKind::None, false, false},
};
}  // namespace

std::vector<std::string> strategy_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Strategy strategy_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    Strategy s;
    s.name = p.name;
    s.param_dtype = p.param;
    s.autocast = p.autocast;
    s.scaler.kind = p.scaler;
    if (p.scaler == ScalerKind::Static) s.scaler.init_scale = 1024.0;
    s.master_weights = p.master;
    s.tf32 = p.tf32;
    s.deterministic = true;
    if (s.name.rfind("fp8", 0) == 0) {
      s.fp8 = Fp8Config{};
      if (s.name == "fp8-delayed") s.fp8->scaling = Fp8Scaling::Delayed;
    }
    return s;
  }
  std::string known;
  for (const auto& n : strategy_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown strategy '" + name + "' (expected one of: " + known + ")");
}

void check_supported(const Strategy& s, const at::Device& device) {
  if (device.is_cuda()) {
    if (!at::hasCUDA())
      throw std::runtime_error("unsupported here: device cuda requested but no CUDA device is available");
    const bool wants_bf16 = s.param_dtype == at::kBFloat16 || s.autocast == at::kBFloat16;
    const DeviceInfo info = device_info(device);
    if (wants_bf16 && info.compute_capability_major < 8)
      throw std::runtime_error("unsupported here: bf16 needs compute capability >= 8.0, " + info.name + " has " +
                               std::to_string(info.compute_capability_major) + "." +
                               std::to_string(info.compute_capability_minor));
    if (s.tf32 && info.compute_capability_major < 8)
      throw std::runtime_error("unsupported here: TF32 needs compute capability >= 8.0, " + info.name + " has " +
                               std::to_string(info.compute_capability_major) + "." +
                               std::to_string(info.compute_capability_minor));
    if (s.fp8 && (info.compute_capability_major * 10 + info.compute_capability_minor) < 89)
      throw std::runtime_error("unsupported here: strategy '" + s.name +
                               "' needs FP8 tensor cores (compute capability "
                               ">= 8.9, Ada or Hopper); " +
                               info.name + " has " + std::to_string(info.compute_capability_major) + "." +
                               std::to_string(info.compute_capability_minor) + ". ampcheck does not fall back to bf16");
  } else if (!device.is_cpu()) {
    throw std::runtime_error(std::string("unsupported here: device ") + device.str() +
                             " (ampcheck runs on cpu or cuda)");
  } else if (s.fp8 && !s.fp8->emulate_on_cpu) {
    throw std::runtime_error(
        "unsupported here: strategy '" + s.name +
        "' needs FP8 tensor cores (a CUDA GPU of compute "
        "capability >= 8.9, Ada or Hopper); the CPU has none. ampcheck does not fall back to bf16");
  }
  if (s.fp8 && s.autocast != at::kBFloat16)
    throw std::invalid_argument("strategy '" + s.name + "': FP8 matmuls run beside bf16 autocast (autocast: bf16)");
  if (s.fp8 && s.param_dtype != at::kFloat)
    throw std::invalid_argument("strategy '" + s.name +
                                "': FP8 keeps fp32 parameters as the master weights (params: fp32)");
  if (s.master_weights && s.param_dtype == at::kFloat)
    throw std::invalid_argument("strategy '" + s.name +
                                "': master_weights needs fp16 or bf16 params (they are the fp32 copy)");
  if (s.param_dtype == at::kHalf && s.autocast == at::kBFloat16)
    throw std::invalid_argument("strategy '" + s.name + "': fp16 params under bf16 autocast is not a strategy");
}

NumericsGuard::NumericsGuard(const Strategy& s, const StackFault& fault) {
  auto& ctx = at::globalContext();
  fp16_reduction_ = ctx.allowFP16ReductionCuBLAS();
  bf16_reduction_ = ctx.allowBF16ReductionCuBLAS();
  matmul_precision_ = ctx.float32MatmulPrecision();
  tf32_cublas_ = ctx.allowTF32CuBLAS();
  tf32_cudnn_ = ctx.allowTF32CuDNN();
  deterministic_ = ctx.deterministicAlgorithms();
  deterministic_warn_only_ = ctx.deterministicAlgorithmsWarnOnly();
  cudnn_benchmark_ = ctx.benchmarkCuDNN();
  cudnn_deterministic_ = ctx.deterministicCuDNN();
  ctx.setAllowTF32CuBLAS(s.tf32);
  ctx.setAllowTF32CuDNN(s.tf32);
  if (s.deterministic) {
    // cuBLAS is deterministic only with a fixed workspace; must be set before cuBLAS's first use in the process.
    setenv("CUBLAS_WORKSPACE_CONFIG", kDeterministicCublasWorkspace, /*overwrite=*/0);
  }
  ctx.setDeterministicAlgorithms(s.deterministic, /*warn_only=*/false);
  ctx.setBenchmarkCuDNN(!s.deterministic && cudnn_benchmark_);
  ctx.setDeterministicCuDNN(s.deterministic);
  if (fault.tf32) {
    ctx.setAllowTF32CuBLAS(true);
    ctx.setAllowTF32CuDNN(true);
  }
  if (fault.nondeterministic) {
    ctx.setDeterministicAlgorithms(false, false);
    ctx.setDeterministicCuDNN(false);
    ctx.setBenchmarkCuDNN(true);
  }
  if (fault.reduced_reduction) {
    ctx.setAllowFP16ReductionCuBLAS(true, true);
    ctx.setAllowBF16ReductionCuBLAS(true, true);
  }
  if (fault.matmul_bf16) ctx.setFloat32MatmulPrecision("medium");
}

NumericsGuard::~NumericsGuard() {
  auto& ctx = at::globalContext();
  ctx.setFloat32MatmulPrecision(matmul_precision_ == at::Float32MatmulPrecision::HIGHEST ? "highest"
                                : matmul_precision_ == at::Float32MatmulPrecision::HIGH  ? "high"
                                                                                         : "medium");
  ctx.setAllowTF32CuBLAS(tf32_cublas_);
  ctx.setAllowTF32CuDNN(tf32_cudnn_);
  ctx.setDeterministicAlgorithms(deterministic_, deterministic_warn_only_);
  ctx.setBenchmarkCuDNN(cudnn_benchmark_);
  ctx.setDeterministicCuDNN(cudnn_deterministic_);
  auto restore = [](at::CuBLASReductionOption o, auto set) {
    set(o == at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK,
        o != at::CuBLASReductionOption::DisallowReducedPrecisionDisallowSplitK);
  };
  restore(fp16_reduction_, [&](bool r, bool k) { ctx.setAllowFP16ReductionCuBLAS(r, k); });
  restore(bf16_reduction_, [&](bool r, bool k) { ctx.setAllowBF16ReductionCuBLAS(r, k); });
}

}  // namespace ampcheck::engine
