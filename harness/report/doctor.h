// doctor — what a user needs to know about the numerical stack before trusting a run on it: device, compute
// capability, driver-side versions (CUDA runtime, cuDNN, LibTorch), bf16 and fp8 support, TF32 and determinism
// flags, a measured matrix-multiply rate per dtype, and a few-second numerical smoke test (a GradScaler skip and
// back-off, fp16 and bf16 autocast training steps against fp32).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ampcheck::report {

// Runs the measurements on `device_spec` (auto | cpu | cuda). `matmul_size` is the square matrix size of the rate
// measurement (default sized for a GPU; smaller on a CPU).
nlohmann::json doctor_report(const std::string& device_spec, int64_t matmul_size = 0);
std::string format_doctor(const nlohmann::json& report);

// The measured matmul rate of the device in a compute dtype (fp32 | tf32 | fp16 | bf16), TFLOP/s: the median of
// timed square matmuls of size n (0 = 8192 on a GPU, 512 on a CPU) — the peak MFU is quoted against.
double measured_matmul_tflops(const std::string& device_spec, const std::string& compute_dtype, int64_t n = 0);

}  // namespace ampcheck::report
