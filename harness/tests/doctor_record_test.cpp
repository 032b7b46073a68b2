// doctor's JSON as a record (doctor/doctor_record.h, gpu_topology.h, distributed/allreduce_check.h): the sections a
// CPU cannot fill — GPUs, peer access, the link matrix, the TF32 / FP8 rates, the FP8 check, a smoke-test loss that
// is an error's text, an all-reduce check not required — written key for key and value for value as the hand-written
// report wrote them (the literals below are that code's), and read back into the same record.
#include "distributed/allreduce_check.h"
#include "doctor/doctor.h"
#include "doctor/doctor_record.h"
#include "io/record_json.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using ampcheck::doctor::DoctorReport;

DoctorReport gpu_report() {
  DoctorReport r;
  r.device = {"NVIDIA H100 80GB HBM3", "h100", "9.0", 85028224};
  r.versions = {"0.1.0", "2.11.0", "570.1", "12.8", "12.8", "9.8"};
  r.topology.gpus = {{0, "NVIDIA H100 80GB HBM3", 85028224, "9.0", "00000000:18:00.0"},
                     {1, "NVIDIA H100 80GB HBM3", 85028224, "9.0", ""}};
  r.topology.peer_access = {{false, true}, {true, false}};
  r.topology.links = ampcheck::doctor::GpuLinks{{"GPU0", "GPU1"}, {{"X", "NV18"}, {"NV18", "X"}}, "every pair NV18"};
  r.support = {true, true, true, {"gloo", "nccl"}, true, false};
  r.stack = {{"torch", "2.11.0"}, {"cublas", "12.8"}, {"env_NCCL_ALGO", "(unset)"}};
  r.flags = {true, true, false, false, 16};
  r.matmul.size = 8192;
  r.matmul.fp32_tflops = 51.5;
  r.matmul.tf32_tflops = 370.25;
  r.matmul.fp16_tflops = 700.5;
  r.matmul.bf16_tflops = 710.75;
  r.matmul.fp8_e4m3_tflops = 1200.5;
  r.fp8_check = ampcheck::doctor::DoctorFp8Check{4096, 0.03125, 0.00390625, 0.0625, true};
  r.smoke_test.fp32_loss = 4.75;
  r.smoke_test.fp16_autocast_loss = std::string("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED");
  r.smoke_test.bf16_autocast_loss = std::string();  // not run
  r.smoke_test.gradscaler_inf_skipped_steps = 1;
  r.smoke_test.gradscaler_scale_after = 32768.0;
  r.smoke_test.ok = false;
  return r;
}

}  // namespace

TEST(DoctorRecord, GpuSectionsAreWrittenAsTheHandWrittenReportWroteThem) {
  const DoctorReport r = gpu_report();
  // as doctor_report and gpu_topology built them before the record (nlohmann::json: keys sorted either way)
  nlohmann::json want;
  want["device"] = {
      {"name", "NVIDIA H100 80GB HBM3"}, {"class", "h100"}, {"compute_capability", "9.0"}, {"memory_bytes", 85028224}};
  want["versions"] = {{"ampcheck", "0.1.0"},   {"libtorch", "2.11.0"},   {"nvidia_driver", "570.1"},
                      {"cuda_driver", "12.8"}, {"cuda_runtime", "12.8"}, {"cudnn", "9.8"}};
  want["topology"]["gpus"] = nlohmann::json::array();
  want["topology"]["gpus"].push_back({{"index", 0},
                                      {"name", "NVIDIA H100 80GB HBM3"},
                                      {"memory_bytes", 85028224},
                                      {"compute_capability", "9.0"},
                                      {"pci_bus_id", "00000000:18:00.0"}});
  want["topology"]["gpus"].push_back({{"index", 1},
                                      {"name", "NVIDIA H100 80GB HBM3"},
                                      {"memory_bytes", 85028224},
                                      {"compute_capability", "9.0"},
                                      {"pci_bus_id", ""}});
  want["topology"]["peer_access"] = {{false, true}, {true, false}};
  // (the matrix as LinkMatrix::links: a brace list of two-string lists would read as an object)
  const std::vector<std::vector<std::string>> matrix = {{"X", "NV18"}, {"NV18", "X"}};
  want["topology"]["links"] = {{"gpus", {"GPU0", "GPU1"}}, {"matrix", matrix}, {"summary", "every pair NV18"}};
  want["support"] = {{"bf16", true}, {"fp8_e4m3_matmul", true}, {"tf32", true}};
  want["support"]["c10d_backends"] = {"gloo", "nccl"};
  want["support"]["fused_cuda_kernels"] = true;
  want["support"]["gemm_epilogues"] = false;
  want["stack"] = {{"torch", "2.11.0"}, {"cublas", "12.8"}, {"env_NCCL_ALGO", "(unset)"}};
  want["flags"] = {{"tf32_cublas", true},
                   {"tf32_cudnn", true},
                   {"deterministic_algorithms", false},
                   {"cudnn_benchmark", false},
                   {"intra_op_threads", 16}};
  want["matmul"] = {{"size", 8192},         {"fp32_tflops", 51.5},   {"tf32_tflops", 370.25},
                    {"fp16_tflops", 700.5}, {"bf16_tflops", 710.75}, {"fp8_e4m3_tflops", 1200.5}};
  want["fp8_check"] = {
      {"size", 4096}, {"fp8_rel_error", 0.03125}, {"bf16_rel_error", 0.00390625}, {"bound", 0.0625}, {"ok", true}};
  want["smoke_test"] = {{"fp32_loss", 4.75},
                        {"fp16_autocast_loss", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"},
                        {"bf16_autocast_loss", ""},
                        {"gradscaler_inf_skipped_steps", 1},
                        {"gradscaler_scale_after", 32768.0},
                        {"ok", false}};
  const nlohmann::json got = ampcheck::io::record_to_json(r);
  EXPECT_EQ(got.dump(2), want.dump(2)) << "got:\n" << got.dump(2) << "\nwant:\n" << want.dump(2);

  // a CPU's topology: no GPU, no link matrix (null), no error; no TF32 / FP8 rate, no FP8 check
  DoctorReport cpu;
  const nlohmann::json c = ampcheck::io::record_to_json(cpu);
  EXPECT_EQ(c["topology"].dump(), R"({"gpus":[],"links":null,"peer_access":[]})");
  EXPECT_EQ(c["matmul"].dump(), R"({"fp16_tflops":null,"fp32_tflops":null,"size":0})");
  EXPECT_FALSE(c.contains("fp8_check"));
  // a link matrix that could not be read: null and the reason
  cpu.topology.links_error = "nvidia-smi topo -m printed nothing (nvidia-smi not on PATH?)";
  EXPECT_EQ(ampcheck::io::record_to_json(cpu.topology)["links_error"], cpu.topology.links_error);
}

TEST(DoctorRecord, ReadBackIntoTheSameRecord) {
  const DoctorReport r = gpu_report();
  const nlohmann::json j = ampcheck::io::record_to_json(r);
  DoctorReport back;
  ampcheck::io::record_from_json(j, back);
  EXPECT_EQ(ampcheck::io::record_to_json(back), j);
  ASSERT_TRUE(back.topology.links.has_value());
  EXPECT_EQ(back.topology.links->matrix[0][1], "NV18");
  EXPECT_TRUE(back.topology.peer_access[1][0]);
  EXPECT_EQ(std::get<double>(back.smoke_test.fp32_loss), 4.75);
  EXPECT_EQ(std::get<std::string>(back.smoke_test.fp16_autocast_loss), "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED");
  EXPECT_FALSE(back.matmul.fp8_e4m3_tflops.has_value() && *back.matmul.fp8_e4m3_tflops != 1200.5);
  // a loss that is neither a number nor a text names the field and both kinds
  nlohmann::json bad = j;
  bad["smoke_test"]["fp32_loss"] = true;
  try {
    ampcheck::io::record_from_json(bad, back);
    FAIL() << "a boolean loss was read";
  } catch (const ampcheck::io::FieldError& e) {
    EXPECT_EQ(e.field, "smoke_test.fp32_loss");
    EXPECT_EQ(e.expected, "a number or null or a string");
  }
}

TEST(DoctorRecord, AnAllReduceCheckNotRequiredSaysSo) {
  ampcheck::distributed::AllReduceCheck c;
  c.spec.backend = "nccl";
  c.error = "backend nccl not compiled in";
  nlohmann::json j = ampcheck::distributed::to_json(c);
  EXPECT_FALSE(j.contains("required")) << "required is the default";
  c.required = false;
  j = ampcheck::distributed::to_json(c);
  // as usecases::doctor wrote it by hand: the check's fields and "required": false
  const nlohmann::json want = {{"backend", "nccl"}, {"world_size", 2},     {"bytes", 64 << 20},
                               {"iterations", 20},  {"device", ""},        {"ran", false},
                               {"correct", false},  {"wrong_elements", 0}, {"median_ms", 0.0},
                               {"algbw_gbs", 0.0},  {"busbw_gbs", 0.0},    {"error", "backend nccl not compiled in"},
                               {"required", false}};
  EXPECT_EQ(j.dump(), want.dump());
}

// The terminal table straight from the record: every GPU-only line as the formatter that read doctor's JSON by its
// keys printed it (the literals are that code's output on this report, commit 5b08763).
TEST(DoctorRecord, TheTableOfAGpuReportIsTheOneTheJsonGave) {
  DoctorReport r = gpu_report();
  r.stack["cpu_isa"] = "fma avx2 avx512f";
  r.stack["aten_cpu_capability"] = "AVX512";
  r.stack["fp16_reduction_cublas"] = "reduced precision, split-K";
  r.stack["bf16_reduction_cublas"] = "full precision";
  ampcheck::distributed::AllReduceCheck c;
  c.spec = {"nccl", 8, 256 << 20, 20};
  c.device = "cuda:0..7";
  c.ran = c.correct = true;
  c.median_ms = 1.25;
  c.algbw_gbs = 214.7;
  c.busbw_gbs = 375.8;
  auto table = [&] {
    return ampcheck::doctor::format_doctor(
        r, ampcheck::doctor::doctor_line("all-reduce check", ampcheck::distributed::describe(c)));
  };
  EXPECT_EQ(table(), R"(device                NVIDIA H100 80GB HBM3 (h100)
compute capability    9.0
libtorch              2.11.0
driver                570.1 (supports CUDA 12.8)
cuda runtime          12.8
cudnn                 9.8
c10d backends         gloo, nccl
fused CUDA kernels    compiled (engine options head_loss: fused, fused_layernorm, fused_bias_gelu, fused_grad_check, fused_param_norm)
GEMM epilogues        cuBLASLt not linked: gemm_epilogues runs the stock ops
bf16 / fp8 / tf32     yes / yes / yes
TF32 cuBLAS / cuDNN   on / on
deterministic         off
intra-op threads      16
CPU ISA / ATen CPU    fma avx2 avx512f / AVX512
cuBLAS reductions     reduced precision, split-K / full precision (fp16 / bf16)
matmul TFLOP/s        fp32 51.5  tf32 370  fp16 700  bf16 711  fp8_e4m3 1.2e+03  (n=8192)
fp8 check             OK: e4m3 scaled matmul (n=4096) relative error 3.12% vs fp64 (bound 6.25%; bf16 0.391%)
GPUs                  2 visible
  GPU 0               NVIDIA H100 80GB HBM3, 0.1 GiB, sm 9.0, 00000000:18:00.0
  GPU 1               NVIDIA H100 80GB HBM3, 0.1 GiB, sm 9.0
peer access           every pair
GPU links             every pair NV18
all-reduce check      OK: nccl, 8 ranks (cuda:0..7), 256 MiB fp32 SUM, median 1.25 ms of 20: algbw 215 GB/s, busbw 376 GB/s; result exact
smoke test            FAILED: loss after 12 steps fp32 4.75, fp16 autocast cuDNN error: CUDNN_STATUS_NOT_SUPPORTED, bf16 autocast ; planted inf: 1 skipped, scale 32768.0
)");
  c.ran = false;
  c.error = "backend nccl not compiled in";
  c.required = false;
  EXPECT_NE(table().find(R"(all-reduce check      not run: nccl, 8 ranks: backend nccl not compiled in
)"),
            std::string::npos)
      << table();
  // no link matrix (and why), a pair without peer access, a failed FP8 check, a scale that is not a number
  r.topology.links.reset();
  r.topology.links_error = "nvidia-smi topo -m printed nothing";
  r.topology.peer_access = {{false, false}, {true, false}};
  r.fp8_check->ok = false;
  r.smoke_test.ok = true;
  r.smoke_test.gradscaler_scale_after = NAN;
  const std::string text = ampcheck::doctor::format_doctor(r);
  for (
      const char* want : {
          R"(fp8 check             FAILED: e4m3 scaled matmul (n=4096) relative error 3.12% vs fp64 (bound 6.25%; bf16 0.391%)
)",
          R"(peer access           not between 0->1
)",
          R"(GPU links             unknown: nvidia-smi topo -m printed nothing
)",
          R"(smoke test            OK: loss after 12 steps fp32 4.75, fp16 autocast cuDNN error: CUDNN_STATUS_NOT_SUPPORTED, bf16 autocast ; planted inf: 1 skipped, scale null
)",
      })
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_EQ(text.find("all-reduce check"), std::string::npos) << text;
}
