// doctor's machine view for data-parallel runs: `nvidia-smi topo -m`'s link matrix parsed (escape codes, NIC rows and
// the legend ignored), the one-line description, and the all-reduce check's exact-sum verification (the pattern
// each rank contributes sums to integers below 2^24, so the check is bit for bit and one wrong element counts).
#include "distributed/allreduce_check.h"
#include "doctor/doctor.h"
#include "io/record_json.h"
#include "doctor/gpu_topology.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using ampcheck::doctor::describe_links;
using ampcheck::doctor::parse_topo_matrix;

namespace {
// the shape of nvidia-smi 580's output for an 8-GPU NVLink machine, header underlined as on a terminal
std::string eight_gpus() {
  std::string s =
      "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA "
      "ID\x1b[0m\n";
  for (int i = 0; i < 8; ++i) {
    s += "GPU" + std::to_string(i);
    for (int j = 0; j < 8; ++j) s += i == j ? "\t X " : "\tNV18";
    s += "\tPXB\tSYS\t0-55,112-167\t0\t\tN/A\n";
  }
  s += "NIC0\tPXB\tPXB\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\t X \tSYS\n\nLegend:\n\n  X    = Self\n  NV#  = Connection "
       "traversing a bonded set of # NVLinks\n";
  return s;
}
}  // namespace

TEST(ReportTopology, ParsesTheEightGpuNvlinkMatrix) {
  const auto m = parse_topo_matrix(eight_gpus());
  ASSERT_EQ(m.gpus.size(), 8u);
  EXPECT_EQ(m.gpus[7], "GPU7");
  ASSERT_EQ(m.links.size(), 8u);
  EXPECT_EQ(m.links[3][3], "X");
  EXPECT_EQ(m.links[0][7], "NV18");
  EXPECT_EQ(m.links[7].size(), 8u);  // the NIC and affinity columns are not links between GPUs
  EXPECT_EQ(describe_links(m), "every pair NV18 (18 bonded NVLinks)");
}

TEST(ReportTopology, MixedLinksNameTheirPairsAndOneGpuHasNone) {
  const std::string two_by_two =
      "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
      "GPU0\t X \tNV4\tSYS\t0-15\n"
      "GPU1\tNV4\t X \tSYS\t0-15\n"
      "GPU2\tSYS\tSYS\t X \t16-31\n";
  const auto m = parse_topo_matrix(two_by_two);
  EXPECT_EQ(describe_links(m),
            "NV4 (4 bonded NVLinks): GPU0-GPU1; SYS (PCIe and the link between NUMA nodes): GPU0-GPU2 GPU1-GPU2");
  EXPECT_EQ(describe_links(parse_topo_matrix("\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n")), "one GPU: no pairs");
}

TEST(ReportTopology, TextWithoutAMatrixOrAShortRowIsAnErrorSayingWhat) {
  try {
    parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU matrix"), std::string::npos) << e.what();
  }
  try {
    parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("line 3 (GPU1): 2 cells, expected a link for each of 2 GPUs"),
              std::string::npos)
        << e.what();
  }
}

// The ranks' buffers summed as any all-reduce would (here in several orders) are exact; one element off by one ulp
// is counted — the check cannot pass a wrong reduction.
TEST(DoctorAllReduce, ExactSumIsVerifiedBitForBitAndAWrongElementCounts) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  for (int64_t world : {1, 2, 8, 64}) {
    at::Tensor sum = at::zeros({100003}, opts), reversed = at::zeros({100003}, opts);
    for (int64_t r = 0; r < world; ++r) sum += ampcheck::distributed::allreduce_check_input(100003, r, opts);
    for (int64_t r = world - 1; r >= 0; --r) reversed += ampcheck::distributed::allreduce_check_input(100003, r, opts);
    EXPECT_EQ(ampcheck::distributed::allreduce_check_wrong_elements(sum, world), 0) << world;
    EXPECT_EQ(ampcheck::distributed::allreduce_check_wrong_elements(reversed, world), 0) << world;
    EXPECT_EQ(ampcheck::distributed::allreduce_check_wrong_elements(sum, world + 1), 100003)
        << world;  // a rank missing
    sum[77777] = std::nextafter(sum[77777].item<float>(), 1e9f);
    EXPECT_EQ(ampcheck::distributed::allreduce_check_wrong_elements(sum, world), 1) << world;
  }
}

// The report's GPU section is present and empty on a machine without CUDA; the all-reduce line formats both ways.
TEST(DoctorAllReduce, LinesForAPassingAndAFailedCheck) {
  const auto r = ampcheck::doctor::doctor_report("cpu", 128);
  if (!at::hasCUDA()) EXPECT_TRUE(r.topology.gpus.empty());
  EXPECT_TRUE(ampcheck::io::record_to_json(r).contains("topology"));
  ampcheck::distributed::AllReduceCheck c;
  c.spec.backend = "nccl";
  c.spec.world_size = 8;
  c.spec.bytes = 256 << 20;
  c.ran = c.correct = true;
  c.device = "cuda:0..7";
  c.median_ms = 1.25;
  c.algbw_gbs = 214.7;
  c.busbw_gbs = 375.8;
  auto text = [&] {
    return ampcheck::doctor::format_doctor(
        r, ampcheck::doctor::doctor_line("all-reduce check", ampcheck::distributed::describe(c)));
  };
  EXPECT_NE(text().find("all-reduce check      OK: nccl, 8 ranks (cuda:0..7), 256 MiB fp32 SUM, median 1.25 ms of 20: "
                        "algbw 215 GB/s, busbw 376 GB/s; result exact\nsmoke test"),
            std::string::npos)
      << text();
  c.correct = false;
  c.wrong_elements = 12;
  EXPECT_NE(text().find("FAILED: nccl, 8 ranks"), std::string::npos);
  EXPECT_NE(text().find("result 12 elements wrong"), std::string::npos);
}
