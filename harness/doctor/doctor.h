// doctor — what a user needs to know about the numerical stack before trusting a run on it: device, compute
// capability, driver-side versions (CUDA runtime, cuDNN, LibTorch), bf16 and fp8 support, TF32 and determinism
// flags, a measured matrix-multiply rate per dtype, and a few-second numerical smoke test (a GradScaler skip and
// back-off, fp16 and bf16 autocast training steps against fp32).
#pragma once

#include "doctor/doctor_record.h"

#include <ATen/ATen.h>

#include <cmath>

#include <string>

namespace ampcheck::doctor {

// Runs the measurements on `device_spec` (auto | cpu | cuda). `matmul_size` is the square matrix size of the rate
// measurement (default sized for a GPU; smaller on a CPU). The record (doctor_record.h); `--json` is its
// io::record_to_json.
DoctorReport doctor_report(const std::string& device_spec, int64_t matmul_size = 0);
// The report as the terminal table, one doctor_line per item, straight from the record. `checks`: lines of checks a
// layer above ran beside the report (usecases::doctor's all-reduce check), printed before the smoke test.
std::string format_doctor(const DoctorReport& report, const std::string& checks = "");
// "name                  value\n": a line of the table (the value from column 23).
std::string doctor_line(const std::string& name, const std::string& value);

// The measured matmul rate of the device in a compute dtype (fp32 | tf32 | fp16 | bf16), TFLOP/s: the median of
// timed square matmuls of size n (0 = 8192 on a GPU, 512 on a CPU) — the peak MFU is quoted against.
double measured_matmul_tflops(const at::Device& device, const std::string& compute_dtype, int64_t n = 0);

// The FP8 numerical check: an (n x n) @ (n x n)^T product of N(0, 1) matrices through the fp8 strategy's own casts
// (engine/fp8, current scaling, e4m3) and at::_scaled_mm, against the product in fp64. Each operand element is rounded
// to e4m3's 3 mantissa bits (relative error at most 2^-4), so the product's relative (Frobenius) error must stay below
// 2^-4; and it must exceed 4x bf16's error on the same operands, or the product was not computed in FP8.
struct Fp8Check {
  double fp8_rel_error = NAN, bf16_rel_error = NAN;
  bool ok = false;
};
Fp8Check fp8_numerical_check(const at::Device& device, int64_t n);
// e4m3 x e4m3 -> bf16 rate of at::_scaled_mm (n x n x n), TFLOP/s, median of timed repetitions.
double fp8_matmul_tflops(const at::Device& device, int64_t n);

}  // namespace ampcheck::doctor
