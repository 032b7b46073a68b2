// doctor: the report has every section, measured rates are positive, and the numerical smoke test passes on a
// healthy CPU stack (fp16 / bf16 autocast within their floors of fp32 after 12 steps, a planted inf skipped once
// with the scale halved).
#include "report/doctor.h"

#include <gtest/gtest.h>

TEST(Doctor, ReportHasEverySectionAndTheSmokeTestPassesOnCpu) {
  const auto j = ampcheck::report::doctor_report("cpu", 128);
  for (const char* k : {"device", "versions", "support", "flags", "matmul", "smoke_test"}) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["device"]["class"], "cpu");
  EXPECT_EQ(j["versions"]["libtorch"], "2.11.0");
  EXPECT_GT(j["matmul"]["fp32_tflops"].get<double>(), 0.0);
  EXPECT_GT(j["matmul"]["bf16_tflops"].get<double>(), 0.0);
  EXPECT_EQ(j["smoke_test"]["gradscaler_inf_skipped_steps"], 1);
  EXPECT_EQ(j["smoke_test"]["gradscaler_scale_after"], 32768.0);
  EXPECT_TRUE(j["smoke_test"]["ok"].get<bool>()) << j["smoke_test"].dump();
  EXPECT_NE(ampcheck::report::format_doctor(j).find("smoke test            OK"), std::string::npos);
}
