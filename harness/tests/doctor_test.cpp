// doctor: the report has every section, measured rates are positive, and the numerical smoke test passes on a
// healthy CPU stack (fp16 / bf16 autocast within their floors of fp32 after 12 steps, a planted inf skipped once
// with the scale halved).
#include "kernels/fused.h"
#include "doctor/doctor.h"
#include "io/record_json.h"

#include <gtest/gtest.h>

TEST(Doctor, ReportHasEverySectionAndTheSmokeTestPassesOnCpu) {
  const auto r = ampcheck::doctor::doctor_report("cpu", 128);
  const auto j = ampcheck::io::record_to_json(r);
  for (const char* k : {"device", "versions", "support", "flags", "matmul", "smoke_test"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["device"]["class"], "cpu");
  EXPECT_EQ(j["versions"]["libtorch"], "2.11.0");
  EXPECT_GT(j["matmul"]["fp32_tflops"].get<double>(), 0.0);
  EXPECT_GT(j["matmul"]["bf16_tflops"].get<double>(), 0.0);
  EXPECT_EQ(j["smoke_test"]["gradscaler_inf_skipped_steps"], 1);
  EXPECT_EQ(j["smoke_test"]["gradscaler_scale_after"], 32768.0);
  EXPECT_TRUE(j["smoke_test"]["ok"].get<bool>()) << j["smoke_test"].dump();
  EXPECT_NE(ampcheck::doctor::format_doctor(r).find("smoke test            OK"), std::string::npos);
  // whether this build carries the fused CUDA kernels (the engine options' ATen references stand in where not)
  EXPECT_EQ(j["support"]["fused_cuda_kernels"].get<bool>(), ampcheck::kernels::cuda_kernels_built());
  EXPECT_NE(ampcheck::doctor::format_doctor(r).find("fused CUDA kernels"), std::string::npos);
}

// No FP8 on the CPU: support "no", no rate, the check not run — and the line says why.
TEST(Doctor, Fp8IsReportedUnsupportedOnCpu) {
  const auto r = ampcheck::doctor::doctor_report("cpu", 128);
  const auto j = ampcheck::io::record_to_json(r);
  EXPECT_FALSE(j["support"]["fp8_e4m3_matmul"].get<bool>());
  EXPECT_FALSE(j["matmul"].contains("fp8_e4m3_tflops"));
  EXPECT_FALSE(j.contains("fp8_check"));
  EXPECT_NE(ampcheck::doctor::format_doctor(r).find("fp8 check             not run: no FP8 matmuls on this device"),
            std::string::npos);
}

// The FP8 numerical check's arithmetic, on torch's CPU _scaled_mm (the same casts and semantics as the GPU's; the
// doctor runs it only on FP8 GPUs): relative error a few percent — below e4m3's 2^-4, above 4x bf16's.
TEST(Doctor, Fp8NumericalCheckSeparatesFp8FromBf16) {
  const auto c = ampcheck::doctor::fp8_numerical_check(at::kCPU, 256);
  EXPECT_TRUE(c.ok) << c.fp8_rel_error << " " << c.bf16_rel_error;
  EXPECT_GT(c.fp8_rel_error, 0.01);
  EXPECT_LT(c.fp8_rel_error, 0.0625);
  EXPECT_LT(c.bf16_rel_error, 0.01);
}
