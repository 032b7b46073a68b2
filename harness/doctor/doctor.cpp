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
#include "io/record_json.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

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

double measured_matmul_tflops(const std::string& device_spec, const std::string& compute_dtype, int64_t n) {
  const at::Device device = engine::resolve_device(device_spec);
  if (n <= 0) n = device.is_cuda() ? 8192 : 512;
  engine::Strategy s = engine::strategy_preset(compute_dtype == "tf32" ? "tf32" : "fp32");
  s.deterministic = false;
  engine::NumericsGuard guard(s);
  const at::ScalarType dtype = compute_dtype == "tf32" ? at::kFloat : engine::parse_dtype(compute_dtype);
  return matmul_tflops(device, dtype, n);
}

nlohmann::json doctor_report(const std::string& device_spec, int64_t matmul_size) {
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
  return io::record_to_json(r);
}

std::string format_doctor(const nlohmann::json& j) {
  std::ostringstream os;
  auto line = [&](const std::string& k, const std::string& v) { os << std::left << std::setw(22) << k << v << "\n"; };
  auto str = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  line("device", str(j["device"]["name"]) + " (" + str(j["device"]["class"]) + ")");
  if (!j["device"]["compute_capability"].get<std::string>().empty())
    line("compute capability", str(j["device"]["compute_capability"]));
  line("libtorch", str(j["versions"]["libtorch"]));
  auto or_unknown = [&](const char* key) {
    const auto& v = j["versions"].value(key, std::string());
    return v.empty() ? std::string("unknown") : v;
  };
  if (!j["device"]["compute_capability"].get<std::string>().empty())
    line("driver", or_unknown("nvidia_driver") + " (supports CUDA " + or_unknown("cuda_driver") + ")");
  line("cuda runtime",
       j["versions"]["cuda_runtime"].get<std::string>().empty() ? "none" : str(j["versions"]["cuda_runtime"]));
  line("cudnn", j["versions"]["cudnn"].get<std::string>().empty() ? "none" : str(j["versions"]["cudnn"]));
  {
    std::string b;
    for (const auto& x : j["support"]["c10d_backends"]) b += (b.empty() ? "" : ", ") + x.get<std::string>();
    line("c10d backends", b.empty() ? "none (data-parallel scenarios unavailable)" : b);
    if (j["support"].contains("fused_cuda_kernels"))
      line("fused CUDA kernels",
           j["support"]["fused_cuda_kernels"].get<bool>()
               ? "compiled (engine options head_loss: fused, fused_layernorm, fused_bias_gelu, fused_grad_check, "
                 "fused_param_norm)"
               : "not compiled: the engine options run their ATen references");
    if (j["support"].contains("gemm_epilogues"))
      line("GEMM epilogues", j["support"]["gemm_epilogues"].get<bool>()
                                 ? "cuBLASLt linked (engine option gemm_epilogues)"
                                 : "cuBLASLt not linked: gemm_epilogues runs the stock ops");
  }
  line("bf16 / fp8 / tf32", std::string(j["support"]["bf16"].get<bool>() ? "yes" : "no") + " / " +
                                (j["support"]["fp8_e4m3_matmul"].get<bool>() ? "yes" : "no") + " / " +
                                (j["support"]["tf32"].get<bool>() ? "yes" : "no"));
  line("TF32 cuBLAS / cuDNN", std::string(j["flags"]["tf32_cublas"].get<bool>() ? "on" : "off") + " / " +
                                  (j["flags"]["tf32_cudnn"].get<bool>() ? "on" : "off"));
  line("deterministic", j["flags"]["deterministic_algorithms"].get<bool>() ? "on" : "off");
  line("intra-op threads", str(j["flags"]["intra_op_threads"]));
  line("CPU ISA / ATen CPU",
       (j["stack"]["cpu_isa"].get<std::string>().empty() ? std::string("-") : str(j["stack"]["cpu_isa"])) + " / " +
           str(j["stack"]["aten_cpu_capability"]));
  line("cuBLAS reductions",
       str(j["stack"]["fp16_reduction_cublas"]) + " / " + str(j["stack"]["bf16_reduction_cublas"]) + " (fp16 / bf16)");
  std::ostringstream rates;
  for (const char* k : {"fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp8_e4m3_tflops"})
    if (j["matmul"].contains(k))
      rates << std::string(k).substr(0, std::string(k).find("_tflops")) << " " << std::setprecision(3)
            << j["matmul"][k].get<double>() << "  ";
  line("matmul TFLOP/s", rates.str() + "(n=" + str(j["matmul"]["size"]) + ")");
  if (j.contains("fp8_check")) {
    const auto& c = j["fp8_check"];
    std::ostringstream m;
    m << std::setprecision(3) << (c["ok"].get<bool>() ? "OK" : "FAILED")
      << ": e4m3 scaled matmul (n=" << c["size"].get<int64_t>() << ") relative error "
      << 100 * c["fp8_rel_error"].get<double>() << "% vs fp64 (bound " << 100 * c["bound"].get<double>() << "%; bf16 "
      << 100 * c["bf16_rel_error"].get<double>() << "%)";
    line("fp8 check", m.str());
  } else {
    line("fp8 check", "not run: no FP8 matmuls on this device (the fp8 strategies are unsupported here)");
  }
  if (j.contains("topology") && !j["topology"]["gpus"].empty()) {
    const auto& t = j["topology"];
    line("GPUs", std::to_string(t["gpus"].size()) + " visible");
    for (const auto& g : t["gpus"]) {
      std::ostringstream m;
      m << std::fixed << std::setprecision(1) << g["name"].get<std::string>() << ", "
        << g["memory_bytes"].get<double>() / (1 << 30) << " GiB, sm " << g["compute_capability"].get<std::string>()
        << (g["pci_bus_id"].get<std::string>().empty() ? "" : ", " + g["pci_bus_id"].get<std::string>());
      line("  GPU " + std::to_string(g["index"].get<int64_t>()), m.str());
    }
    const size_t n = t["gpus"].size();
    if (n > 1) {
      std::string missing;
      for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b < n; ++b)
          if (a != b && !t["peer_access"][a][b].get<bool>())
            missing += " " + std::to_string(a) + "->" + std::to_string(b);
      line("peer access", missing.empty() ? "every pair" : "not between" + missing);
    }
    if (!t["links"].is_null()) line("GPU links", t["links"]["summary"].get<std::string>());
    else if (t.contains("links_error"))
      line("GPU links", "unknown: " + t["links_error"].get<std::string>());
  }
  if (j.contains("allreduce")) {
    const auto& a = j["allreduce"];
    std::ostringstream m;
    m << std::setprecision(3);
    const std::string what =
        a["backend"].get<std::string>() + ", " + std::to_string(a["world_size"].get<int64_t>()) + " ranks";
    if (!a["ran"].get<bool>()) {
      m << (a.value("required", true) ? "FAILED" : "not run") << ": " << what << ": " << a["error"].get<std::string>();
    } else {
      m << (a["correct"].get<bool>() ? "OK" : "FAILED") << ": " << what << " (" << a["device"].get<std::string>()
        << "), " << a["bytes"].get<double>() / (1 << 20) << " MiB fp32 SUM, median " << a["median_ms"].get<double>()
        << " ms of " << a["iterations"].get<int64_t>() << ": algbw " << a["algbw_gbs"].get<double>() << " GB/s, busbw "
        << a["busbw_gbs"].get<double>() << " GB/s; result "
        << (a["correct"].get<bool>() ? std::string("exact")
                                     : std::to_string(a["wrong_elements"].get<int64_t>()) + " elements wrong");
    }
    line("all-reduce check", m.str());
  }
  const auto& s = j["smoke_test"];
  line("smoke test", std::string(s["ok"].get<bool>() ? "OK" : "FAILED") + ": loss after 12 steps fp32 " +
                         str(s["fp32_loss"]) + ", fp16 autocast " + str(s["fp16_autocast_loss"]) + ", bf16 autocast " +
                         str(s["bf16_autocast_loss"]) + "; planted inf: " + str(s["gradscaler_inf_skipped_steps"]) +
                         " skipped, scale " + str(s["gradscaler_scale_after"]));
  return os.str();
}

}  // namespace ampcheck::doctor
