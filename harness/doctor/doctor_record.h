// doctor's report (`ampcheck doctor --json`) as a record: the device, versions, support, flags, the stack fingerprint,
// measured matmul rates, the FP8 check and the smoke test, each field once in a `visit_fields` beside its definition
// (io/record_json.h; the keys sorted, as nlohmann::json writes them). doctor_report fills it, format_doctor prints its
// table; the GPU topology's record is gpu_topology.h's, the all-reduce check's distributed/allreduce_check.h's
// (usecases adds it).
#pragma once

#include "doctor/gpu_topology.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ampcheck::doctor {

struct DoctorDevice {
  std::string name;
  std::string device_class;        // cpu | a GPU's class (engine/device.h)
  std::string compute_capability;  // "8.0"; "" on the CPU
  int64_t memory_bytes = 0;
};

struct DoctorVersions {
  std::string ampcheck, libtorch;
  std::string nvidia_driver, cuda_driver;  // "" on the CPU
  std::string cuda_runtime, cudnn;         // "" where LibTorch has none
};

struct DoctorSupport {
  bool bf16 = false, fp8_e4m3_matmul = false, tf32 = false;
  std::vector<std::string> c10d_backends;  // compiled in: gloo, nccl (on a CUDA device)
  bool fused_cuda_kernels = false;         // harness/kernels compiled (else the ATen references run)
  bool gemm_epilogues = false;             // cuBLASLt linked
};

struct DoctorFlags {
  bool tf32_cublas = false, tf32_cudnn = false, deterministic_algorithms = false, cudnn_benchmark = false;
  int64_t intra_op_threads = 0;
};

// TFLOP/s of an n x n x n matmul per dtype (measured_matmul_tflops); a rate the device lacks is not measured (absent).
struct DoctorMatmul {
  int64_t size = 0;
  double fp32_tflops = NAN, fp16_tflops = NAN;
  std::optional<double> tf32_tflops, bf16_tflops, fp8_e4m3_tflops;
};

// Fp8Check (doctor.h) on an (size x size) product, against its bound 2^-4.
struct DoctorFp8Check {
  int64_t size = 0;
  double fp8_rel_error = NAN, bf16_rel_error = NAN, bound = NAN;
  bool ok = false;
};

// 12 steps of micro per precision; a loss is the number, or the error that stopped its run ("" where not run).
struct DoctorSmokeTest {
  using Loss = std::variant<double, std::string>;
  Loss fp32_loss, fp16_autocast_loss, bf16_autocast_loss;
  int64_t gradscaler_inf_skipped_steps = -1;  // the planted inf: GradScaler must skip one step
  double gradscaler_scale_after = NAN;        // and back off 65536 -> 32768
  bool ok = false;
};

struct DoctorReport {
  DoctorDevice device;
  DoctorVersions versions;
  GpuTopology topology;
  DoctorSupport support;
  std::map<std::string, std::string> stack;  // engine::stack_fingerprint (attributes stack_<key>)
  DoctorFlags flags;
  DoctorMatmul matmul;
  std::optional<DoctorFp8Check> fp8_check;  // FP8 devices only
  DoctorSmokeTest smoke_test;
};

// ---------------------------------------------------------------------------------------------------------------------
// The record's one description (io/record_json.h: the kind from the C++ type; NaN <-> null). `optional`: written
// only when the flag holds.

template <class V>
void visit_fields(DoctorDevice& d, V& v) {
  v("name", d.name);
  v("class", d.device_class);
  v("compute_capability", d.compute_capability);
  v("memory_bytes", d.memory_bytes);
}

template <class V>
void visit_fields(DoctorVersions& x, V& v) {
  v("ampcheck", x.ampcheck);
  v("libtorch", x.libtorch);
  v("nvidia_driver", x.nvidia_driver);
  v("cuda_driver", x.cuda_driver);
  v("cuda_runtime", x.cuda_runtime);
  v("cudnn", x.cudnn);
}

template <class V>
void visit_fields(DoctorSupport& s, V& v) {
  v("bf16", s.bf16);
  v("fp8_e4m3_matmul", s.fp8_e4m3_matmul);
  v("tf32", s.tf32);
  v("c10d_backends", s.c10d_backends);
  v("fused_cuda_kernels", s.fused_cuda_kernels);
  v("gemm_epilogues", s.gemm_epilogues);
}

template <class V>
void visit_fields(DoctorFlags& f, V& v) {
  v("tf32_cublas", f.tf32_cublas);
  v("tf32_cudnn", f.tf32_cudnn);
  v("deterministic_algorithms", f.deterministic_algorithms);
  v("cudnn_benchmark", f.cudnn_benchmark);
  v("intra_op_threads", f.intra_op_threads);
}

template <class V>
void visit_fields(DoctorMatmul& m, V& v) {
  v("size", m.size);
  v("fp32_tflops", m.fp32_tflops);
  v.optional("tf32_tflops", m.tf32_tflops, m.tf32_tflops.has_value());
  v("fp16_tflops", m.fp16_tflops);
  v.optional("bf16_tflops", m.bf16_tflops, m.bf16_tflops.has_value());
  v.optional("fp8_e4m3_tflops", m.fp8_e4m3_tflops, m.fp8_e4m3_tflops.has_value());
}

template <class V>
void visit_fields(DoctorFp8Check& c, V& v) {
  v("size", c.size);
  v("fp8_rel_error", c.fp8_rel_error);
  v("bf16_rel_error", c.bf16_rel_error);
  v("bound", c.bound);
  v("ok", c.ok);
}

template <class V>
void visit_fields(DoctorSmokeTest& s, V& v) {
  v("fp32_loss", s.fp32_loss);
  v("fp16_autocast_loss", s.fp16_autocast_loss);
  v("bf16_autocast_loss", s.bf16_autocast_loss);
  v("gradscaler_inf_skipped_steps", s.gradscaler_inf_skipped_steps);
  v("gradscaler_scale_after", s.gradscaler_scale_after);
  v("ok", s.ok);
}

template <class V>
void visit_fields(DoctorReport& r, V& v) {
  v("device", r.device);
  v("versions", r.versions);
  v("topology", r.topology);
  v("support", r.support);
  v("stack", r.stack);
  v("flags", r.flags);
  v("matmul", r.matmul);
  v.optional("fp8_check", r.fp8_check, r.fp8_check.has_value());
  v("smoke_test", r.smoke_test);
}

}  // namespace ampcheck::doctor
