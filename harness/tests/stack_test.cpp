// The stack fingerprint (engine/device.h): what a run computes on, carried by every trajectory and reference.
#include "engine/device.h"
#include "run/provenance.h"
#include "scenario/scenario.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <gtest/gtest.h>

#include <map>

using namespace ampcheck;

TEST(EngineStack, FingerprintNamesTheCpuStack) {
  std::map<std::string, std::string> fp;
  for (const auto& [k, v] : engine::stack_fingerprint(at::Device("cpu"))) {
    EXPECT_EQ(fp.count(k), 0u) << "key twice: " << k;
    fp[k] = v;
  }
  EXPECT_EQ(fp.at("torch"), engine::libtorch_version());
  EXPECT_EQ(fp.at("device_class"), "cpu");
  EXPECT_EQ(fp.at("aten_cpu_capability"), at::get_cpu_capability());  // what LibTorch's CPU kernels dispatch on
  EXPECT_FALSE(fp.at("aten_cpu_capability").empty());
  EXPECT_EQ(fp.at("threads"), std::to_string(at::get_num_threads()));
  EXPECT_FALSE(fp.at("cpu_model").empty());
  for (const char* k : {"deterministic_algorithms", "tf32_cublas", "tf32_cudnn"})
    EXPECT_TRUE(fp.at(k) == "on" || fp.at(k) == "off") << k << " = " << fp.at(k);
  // a CPU run names no CUDA driver or device property
  EXPECT_EQ(fp.at("cuda_driver"), "");
  EXPECT_EQ(fp.at("compute_capability"), "");
  EXPECT_EQ(fp.at("cublas"), "");
  EXPECT_EQ(fp.at("nccl"), "");
  EXPECT_EQ(fp.at("float32_matmul_precision"), "highest");
}

TEST(EngineStack, APlantedStackFaultShowsInTheFingerprintAndIsUndone) {
  // what validate's --plant does to the process, while the guard lives; and that the guard restores it
  engine::StackFault fault;
  fault.matmul_bf16 = fault.nondeterministic = true;
  engine::Strategy fp32 = engine::strategy_preset("fp32");
  {
    engine::NumericsGuard guard(fp32, fault);
    std::map<std::string, std::string> fp;
    for (const auto& [k, v] : engine::stack_fingerprint(at::Device("cpu"))) fp[k] = v;
    EXPECT_EQ(fp.at("float32_matmul_precision"), "medium");
    EXPECT_EQ(fp.at("deterministic_algorithms"), "off");
  }
  {
    engine::NumericsGuard guard(fp32);
    std::map<std::string, std::string> fp;
    for (const auto& [k, v] : engine::stack_fingerprint(at::Device("cpu"))) fp[k] = v;
    EXPECT_EQ(fp.at("float32_matmul_precision"), "highest");
    EXPECT_EQ(fp.at("deterministic_algorithms"), "on");
  }
  EXPECT_EQ(at::globalContext().float32MatmulPrecision(), at::Float32MatmulPrecision::HIGHEST);
}

TEST(EngineStack, ProvenanceCarriesTheFingerprint) {
  const auto sc = scenario::parse_scenario("name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\nstrategy: fp32\n",
                                           "scenarios/t.yaml");
  const auto p = trajectory::attribute_map(run::provenance(sc, at::Device("cpu")));
  size_t n = 0;
  for (const auto& [k, v] : engine::stack_fingerprint(at::Device("cpu"))) {
    ASSERT_EQ(p.count("stack_" + k), 1u) << k;
    if (k != "threads") EXPECT_EQ(p.at("stack_" + k), v) << k;
    ++n;
  }
  EXPECT_GE(n, 18u);
}
