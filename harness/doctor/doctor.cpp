// doctor implementation.
#include "doctor/doctor.h"
#include "doctor/doctor_record.h"

#include "engine/device.h"
#include "engine/fp8.h"
#include "kernels/fused.h"
#include "kernels/gemm_epilogues.h"
#include "engine/precision.h"
#include "engine/trainer.h"
#include "inject/injection.h"
#include "doctor/gpu_topology.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>
#include <utility>
#include <variant>
#include <vector>

namespace ampcheck::doctor {

namespace {
// TFLOP/s of an n x n x n matrix product in dtype: the better of at::mm and at::linear (on the CPU they reach
// different kernels — for fp16 without native support, oneDNN's linear is ~10x faster than mm's fallback; the
// model uses both), each the median of 5 timed repetitions after 2 warm-ups (device-synchronised).
// Median seconds of one call of fn: 7 timed rounds of `reps` calls, the first 2 discarded as warm-up
// (device-synchronised).
template <class F>
double median_seconds(const at::Device& device, int reps, F fn) {
  std::vector<double> seconds;
  for (int i = 0; i < 7; ++i) {
    engine::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) fn();
    engine::synchronize(device);  // SYNC POINT: timing
    if (i >= 2) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

double matmul_tflops(const at::Device& device, at::ScalarType dtype, int64_t n) {
  at::NoGradGuard no_grad;
  at::Tensor a = at::randn({n, n}, at::TensorOptions().dtype(at::kFloat).device(device)).to(dtype);
  at::Tensor b = at::randn({n, n}, at::TensorOptions().dtype(at::kFloat).device(device)).to(dtype);
  const int reps = device.is_cuda() ? 20 : 2;
  double best = 0;
  for (bool linear : {false, true}) {
    const double sec = median_seconds(device, reps, [&] { linear ? at::linear(a, b) : at::mm(a, b); });
    best = std::max(best, 2.0 * n * n * n / sec / 1e12);
  }
  return best;
}

}  // namespace

Fp8Check fp8_numerical_check(const at::Device& device, int64_t n) {
  at::NoGradGuard no_grad;
  engine::Fp8Config cfg;
  cfg.emulate_on_cpu = device.is_cpu();
  engine::Fp8Matmuls fp8(cfg, {"h.0.doctor"}, device);
  fp8.begin_step(false);
  at::manual_seed(0);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor x = at::randn({n, n}, opts), w = at::randn({n, n}, opts);
  const auto qx = fp8.quantize(fp8.cast_index(0, engine::Fp8Matmuls::kInput), x);
  const auto qw = fp8.quantize(fp8.cast_index(0, engine::Fp8Matmuls::kWeight), w);
  at::Tensor y8 = at::_scaled_mm(qx.data, qw.data.t(), qx.inv_scale, qw.inv_scale, {}, {}, at::kBFloat16, true);
  at::Tensor ybf = at::mm(x.to(at::kBFloat16), w.to(at::kBFloat16).t());
  at::Tensor y64 = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
  auto rel = [&](const at::Tensor& y) {
    return ((y.to(at::kDouble) - y64).norm() / y64.norm()).item<double>();
  };  // SYNC POINT
  Fp8Check c;
  c.fp8_rel_error = rel(y8);
  c.bf16_rel_error = rel(ybf);
  c.ok = c.fp8_rel_error < std::ldexp(1.0, -4) && c.fp8_rel_error > 4 * c.bf16_rel_error;
  return c;
}

double fp8_matmul_tflops(const at::Device& device, int64_t n) {
  at::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor a = at::randn({n, n}, opts).to(at::kFloat8_e4m3fn), b = at::randn({n, n}, opts).to(at::kFloat8_e4m3fn);
  at::Tensor one = at::ones({}, opts);
  const double sec = median_seconds(device, device.is_cuda() ? 20 : 1,
                                    [&] { at::_scaled_mm(a, b.t(), one, one, {}, {}, at::kBFloat16, true); });
  return 2.0 * n * n * n / sec / 1e12;
}

namespace {
// Trains `micro` for 12 steps with a strategy; returns the final loss, or NaN with the error in `error`.
double smoke_train(const at::Device& device, const std::string& strategy, std::string& error,
                   int64_t* skipped = nullptr, double* scale = nullptr, bool plant_inf = false) {
  engine::RunConfig cfg;
  cfg.model.preset = "micro";
  cfg.data.batch_size = 4;
  cfg.data.seq_len = 32;
  cfg.data.corpus_tokens = 1 << 15;
  cfg.loop.steps = 12;
  cfg.strategy = engine::strategy_preset(strategy);
  if (plant_inf) {
    inject::InjectionConfig c;
    c.kind = inject::InjectionKind::GradValue;
    c.steps = {5};
    c.value = INFINITY;
    inject::add_injections(cfg, {c});
  }
  try {
    engine::Trainer t(cfg, device);
    const auto out = t.run();
    if (out.status != engine::RunOutcome::Status::Completed) {
      error = std::string(engine::status_name(out.status)) + (out.error.empty() ? "" : ": " + out.error);
      return NAN;
    }
    if (skipped) *skipped = t.trajectory().skipped_steps();
    if (scale) *scale = t.scaler() ? t.scaler()->get_scale() : 1.0;
    return t.trajectory().rows.back()[trajectory::kLoss];
  } catch (const std::exception& e) {
    error = e.what();
    return NAN;
  }
}
}  // namespace

double measured_matmul_tflops(const at::Device& device, const std::string& compute_dtype, int64_t n) {
  if (n <= 0) n = device.is_cuda() ? 8192 : 512;
  engine::Strategy s = engine::strategy_preset(compute_dtype == "tf32" ? "tf32" : "fp32");
  s.deterministic = false;
  engine::NumericsGuard guard(s);
  const at::ScalarType dtype = compute_dtype == "tf32" ? at::kFloat : engine::parse_dtype(compute_dtype);
  return matmul_tflops(device, dtype, n);
}

DoctorReport doctor_report(const std::string& device_spec, int64_t matmul_size) {
  const at::Device device = engine::resolve_device(device_spec);
  const auto info = engine::device_info(device);
  auto& ctx = at::globalContext();
  DoctorReport r;  // doctor_record.h: the JSON is its description's
  r.device = {info.name, info.device_class,
              device.is_cuda()
                  ? std::to_string(info.compute_capability_major) + "." + std::to_string(info.compute_capability_minor)
                  : "",
              info.total_memory_bytes};
  r.versions = {AMPCHECK_VERSION,
                engine::libtorch_version(),
                device.is_cuda() ? engine::nvidia_driver_version() : "",
                device.is_cuda() ? engine::cuda_driver_version() : "",
                engine::cuda_runtime_version(),
                engine::cudnn_version()};
  const bool bf16 = device.is_cpu() || info.compute_capability_major >= 8;
  const bool fp8 = device.is_cuda() && (info.compute_capability_major > 8 ||
                                        (info.compute_capability_major == 8 && info.compute_capability_minor >= 9));
  // every visible GPU, peer access and the link matrix (a data-parallel run's interconnect)
  r.topology = gpu_topology();
  r.support.bf16 = bf16;
  r.support.fp8_e4m3_matmul = fp8;
  r.support.tf32 = device.is_cuda() && info.compute_capability_major >= 8;
  // the c10d backends this build compiled in (harness/distributed: Gloo where gloo's headers were found, NCCL where
  // nccl.h was)
#ifdef AMPCHECK_HAVE_GLOO
  r.support.c10d_backends.push_back("gloo");
#endif
#ifdef AMPCHECK_HAVE_NCCL
  if (device.is_cuda()) r.support.c10d_backends.push_back("nccl");
#endif
  // the engine's fused CUDA kernels (harness/kernels): compiled where LibTorch has CUDA and nvcc was found; elsewhere
  // the engine options model.head_loss: fused, model.fused_layernorm, model.fused_bias_gelu, train.fused_grad_check and
  // train.fused_param_norm run their ATen references
  r.support.fused_cuda_kernels = kernels::cuda_kernels_built();
  // model.gemm_epilogues: cuBLASLt linked (LibTorch's CUDA::cublasLt) or its ATen reference (the stock ops)
  r.support.gemm_epilogues = kernels::gemm_epilogues_built();
  // the stack fingerprint every trajectory and reference carries (attributes stack_<key>; engine/device.h)
  for (const auto& [k, v] : engine::stack_fingerprint(device)) r.stack[k] = v;
  r.flags = {ctx.allowTF32CuBLAS(), ctx.allowTF32CuDNN(), ctx.deterministicAlgorithms(), ctx.benchmarkCuDNN(),
             static_cast<int64_t>(at::get_num_threads())};
  // measured matmul rates
  const int64_t n = matmul_size > 0 ? matmul_size : (device.is_cuda() ? 8192 : 512);
  r.matmul.size = n;
  r.matmul.fp32_tflops = matmul_tflops(device, at::kFloat, n);
  if (device.is_cuda() && r.support.tf32) {
    engine::Strategy s = engine::strategy_preset("tf32");
    s.deterministic = false;
    engine::NumericsGuard guard(s);
    r.matmul.tf32_tflops = matmul_tflops(device, at::kFloat, n);
  }
  r.matmul.fp16_tflops = matmul_tflops(device, at::kHalf, n);
  if (bf16) r.matmul.bf16_tflops = matmul_tflops(device, at::kBFloat16, n);
  if (fp8) r.matmul.fp8_e4m3_tflops = fp8_matmul_tflops(device, n);
  bool fp8_ok = true;
  if (fp8) {  // the FP8 numerical check (only where FP8 matmuls exist: the strategy is refused elsewhere)
    const Fp8Check c = fp8_numerical_check(device, 4096);
    r.fp8_check = DoctorFp8Check{4096, c.fp8_rel_error, c.bf16_rel_error, std::ldexp(1.0, -4), c.ok};
    fp8_ok = c.ok;
  }
  // numerical smoke test
  std::string err32, err16, errbf, errinf;
  const double l32 = smoke_train(device, "fp32", err32);
  const double l16 = smoke_train(device, "fp16-autocast", err16);
  const double lbf = bf16 ? smoke_train(device, "bf16-autocast", errbf) : NAN;
  int64_t skipped = -1;
  double scale = NAN;
  smoke_train(device, "fp16-autocast", errinf, &skipped, &scale, /*plant_inf=*/true);
  // 12 steps of micro: fp16 / bf16 autocast stay within 2% / 5% of fp32's loss (docs/TOLERANCE.md's floors)
  const bool ok16 = std::isfinite(l16) && std::abs(l16 / l32 - 1) < 0.02;
  const bool okbf = !bf16 || (std::isfinite(lbf) && std::abs(lbf / l32 - 1) < 0.05);
  const bool okinf = skipped == 1 && scale == 32768.0;  // one skip, 65536 * 0.5
  auto loss = [](double l, const std::string& error) {  // the loss, or the error that stopped its run
    return std::isfinite(l) ? DoctorSmokeTest::Loss(l) : DoctorSmokeTest::Loss(error);
  };
  r.smoke_test.fp32_loss = loss(l32, err32);
  r.smoke_test.fp16_autocast_loss = loss(l16, err16);
  r.smoke_test.bf16_autocast_loss = loss(lbf, errbf);
  r.smoke_test.gradscaler_inf_skipped_steps = skipped;
  r.smoke_test.gradscaler_scale_after = scale;
  r.smoke_test.ok = std::isfinite(l32) && ok16 && okbf && okinf && fp8_ok;
  return r;
}

namespace {

// A number as doctor's JSON writes it (nlohmann's shortest round trip: 4.765588283538818, 32768.0; not finite: null),
// so that the text and --json show the same digits.
std::string json_number(double x) { return std::isfinite(x) ? nlohmann::json(x).dump() : "null"; }
std::string json_number(int64_t x) { return std::to_string(x); }
// a smoke-test loss: the number, or the error that stopped its run
std::string loss_text(const DoctorSmokeTest::Loss& l) {
  return std::holds_alternative<double>(l) ? json_number(std::get<double>(l)) : std::get<std::string>(l);
}
// a stack fingerprint key's value ("" where the fingerprint lacks it)
std::string stack_value(const DoctorReport& r, const std::string& key) {
  const auto it = r.stack.find(key);
  return it == r.stack.end() ? "" : it->second;
}

}  // namespace

std::string doctor_line(const std::string& name, const std::string& value) {
  std::ostringstream os;
  os << std::left << std::setw(22) << name << value << "\n";
  return os.str();
}

std::string format_doctor(const DoctorReport& r, const std::string& checks) {
  std::string os;
  auto line = [&](const std::string& k, const std::string& v) { os += doctor_line(k, v); };
  const bool gpu = !r.device.compute_capability.empty();
  line("device", r.device.name + " (" + r.device.device_class + ")");
  if (gpu) line("compute capability", r.device.compute_capability);
  line("libtorch", r.versions.libtorch);
  auto or_unknown = [](const std::string& v) { return v.empty() ? std::string("unknown") : v; };
  if (gpu)
    line("driver",
         or_unknown(r.versions.nvidia_driver) + " (supports CUDA " + or_unknown(r.versions.cuda_driver) + ")");
  line("cuda runtime", r.versions.cuda_runtime.empty() ? "none" : r.versions.cuda_runtime);
  line("cudnn", r.versions.cudnn.empty() ? "none" : r.versions.cudnn);
  {
    std::string b;
    for (const auto& x : r.support.c10d_backends) b += (b.empty() ? "" : ", ") + x;
    line("c10d backends", b.empty() ? "none (data-parallel scenarios unavailable)" : b);
    line("fused CUDA kernels", r.support.fused_cuda_kernels
                                   ? "compiled (engine options head_loss: fused, fused_layernorm, fused_bias_gelu, "
                                     "fused_grad_check, fused_param_norm)"
                                   : "not compiled: the engine options run their ATen references");
    line("GEMM epilogues", r.support.gemm_epilogues ? "cuBLASLt linked (engine option gemm_epilogues)"
                                                    : "cuBLASLt not linked: gemm_epilogues runs the stock ops");
  }
  auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
  auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  line("bf16 / fp8 / tf32", yes(r.support.bf16) + " / " + yes(r.support.fp8_e4m3_matmul) + " / " + yes(r.support.tf32));
  line("TF32 cuBLAS / cuDNN", on(r.flags.tf32_cublas) + " / " + on(r.flags.tf32_cudnn));
  line("deterministic", on(r.flags.deterministic_algorithms));
  line("intra-op threads", json_number(r.flags.intra_op_threads));
  const std::string isa = stack_value(r, "cpu_isa");
  line("CPU ISA / ATen CPU", (isa.empty() ? std::string("-") : isa) + " / " + stack_value(r, "aten_cpu_capability"));
  line("cuBLAS reductions",
       stack_value(r, "fp16_reduction_cublas") + " / " + stack_value(r, "bf16_reduction_cublas") + " (fp16 / bf16)");
  std::ostringstream rates;
  const std::vector<std::pair<const char*, std::optional<double>>> measured = {{"fp32", r.matmul.fp32_tflops},
                                                                               {"tf32", r.matmul.tf32_tflops},
                                                                               {"fp16", r.matmul.fp16_tflops},
                                                                               {"bf16", r.matmul.bf16_tflops},
                                                                               {"fp8_e4m3", r.matmul.fp8_e4m3_tflops}};
  for (const auto& [dtype, rate] : measured)
    if (rate) rates << dtype << " " << std::setprecision(3) << *rate << "  ";
  line("matmul TFLOP/s", rates.str() + "(n=" + json_number(r.matmul.size) + ")");
  if (r.fp8_check) {
    const DoctorFp8Check& c = *r.fp8_check;
    std::ostringstream m;
    m << std::setprecision(3) << (c.ok ? "OK" : "FAILED") << ": e4m3 scaled matmul (n=" << c.size << ") relative error "
      << 100 * c.fp8_rel_error << "% vs fp64 (bound " << 100 * c.bound << "%; bf16 " << 100 * c.bf16_rel_error << "%)";
    line("fp8 check", m.str());
  } else {
    line("fp8 check", "not run: no FP8 matmuls on this device (the fp8 strategies are unsupported here)");
  }
  const GpuTopology& t = r.topology;
  if (!t.gpus.empty()) {
    line("GPUs", std::to_string(t.gpus.size()) + " visible");
    for (const auto& g : t.gpus) {
      std::ostringstream m;
      m << std::fixed << std::setprecision(1) << g.name << ", " << static_cast<double>(g.memory_bytes) / (1 << 30)
        << " GiB, sm " << g.compute_capability << (g.pci_bus_id.empty() ? "" : ", " + g.pci_bus_id);
      line("  GPU " + std::to_string(g.index), m.str());
    }
    const size_t n = t.gpus.size();
    if (n > 1) {
      std::string missing;
      for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b < n; ++b)
          if (a != b && !t.peer_access.at(a).at(b)) missing += " " + std::to_string(a) + "->" + std::to_string(b);
      line("peer access", missing.empty() ? "every pair" : "not between" + missing);
    }
    if (t.links) line("GPU links", t.links->summary);
    else if (!t.links_error.empty())
      line("GPU links", "unknown: " + t.links_error);
  }
  os += checks;
  const DoctorSmokeTest& s = r.smoke_test;
  line("smoke test", std::string(s.ok ? "OK" : "FAILED") + ": loss after 12 steps fp32 " + loss_text(s.fp32_loss) +
                         ", fp16 autocast " + loss_text(s.fp16_autocast_loss) + ", bf16 autocast " +
                         loss_text(s.bf16_autocast_loss) +
                         "; planted inf: " + json_number(s.gradscaler_inf_skipped_steps) + " skipped, scale " +
                         json_number(s.gradscaler_scale_after));
  return os;
}

}  // namespace ampcheck::doctor
