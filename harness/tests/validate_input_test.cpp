// What `ampcheck validate` must refuse as bad input rather than blame on the machine: goldens that fail their seal
// (validate/golden.h: content checksum, scenario, length, configuration), plants that cannot act (validate.h
// check_plant / parse_plant), a CPU capability the processor lacks (engine/cpu_capability.h), and the numerics
// settings of the environment, which are configuration drift (engine::numerics_environment).
#include "engine/cpu_capability.h"
#include "engine/device.h"
#include "engine/trainer.h"
#include "trajectory/trajectory_file.h"
#include "test_support.h"
#include "validate/golden.h"
#include "validate/validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

using namespace ampcheck;

namespace {
// `what` threw std::invalid_argument (or BadGolden) whose message holds every one of `words`
template <typename E, typename F>
void expect_refused(F&& what, const std::vector<std::string>& words, const std::string& label) {
  try {
    what();
    ADD_FAILURE() << label << ": accepted";
  } catch (const E& e) {
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << label << ": " << e.what();
  }
}

trajectory::TrajectoryFile sealed_golden(const engine::RunConfig& cfg) {
  engine::RunConfig run = cfg;
  run.loop.digests = true;
  engine::Trainer t(run, at::kCPU);
  EXPECT_EQ(t.run().status, engine::RunOutcome::Status::Completed);
  trajectory::TrajectoryFile f;
  f.trajectory = t.trajectory();
  f.attributes = trajectory::parse_run_attributes(
      {{"scenario_name", run.name}, {"golden_class", "cpu-test"}, {"stack_torch", "2.11.0"}}, "test");
  validate::seal_golden(f, run);
  return f;
}
}  // namespace

// --plant's text: digits only — no blank, no sign (std::stoll would accept " 5", "+3" and "-0").
TEST(ValidatePlantText, MalformedNumbersAreRefused) {
  for (const char* bad : {"bitflip:param:wte:1:2@ 5", "bitflip:param:wte:1:2@-0", "bitflip:param:wte:+3:2@5",
                          "bitflip:param:wte:1:+2@5", "bitflip:param:wte:1:2@", "bitflip:param:wte:1:2@5x",
                          "bitflip:param:wte:0x1:2@5", "bitflip:param:wte:1:2@99999999999999999999"})
    expect_refused<std::invalid_argument>([&] { validate::parse_plant(bad); }, {bad, "expected"}, bad);
  EXPECT_EQ(validate::parse_plant("bitflip:grad:wte:0:31@0").injections[0].bit, 31);
}

// A plant that cannot act is refused before training, naming the plant and what was expected.
TEST(ValidatePlantCheck, GlobElementBitAndStepAreCheckedAgainstTheModel) {
  const std::vector<validate::ParameterShape> fp32 = {{"wte", 256, 32}, {"h.0.attn.c_attn.bias", 48, 32}};
  const int64_t steps = 40;
  auto check = [&](const std::string& text, const std::vector<validate::ParameterShape>& shapes) {
    validate::check_plant(validate::parse_plant(text), shapes, steps);
  };
  EXPECT_NO_THROW(check("bitflip:param:h.*.c_attn.bias:47:31@39", fp32));
  EXPECT_NO_THROW(check("tf32", fp32));
  expect_refused<std::invalid_argument>([&] { check("bitflip:param:lm_head*:0:3@1", fp32); },
                                        {"lm_head*", "matches no parameter", "wte"}, "glob");
  expect_refused<std::invalid_argument>([&] { check("bitflip:grad:wte:256:3@1", fp32); },
                                        {"element 256", "wte", "0 to 255"}, "element");
  expect_refused<std::invalid_argument>([&] { check("bitflip:param:wte:0:40@1", fp32); },
                                        {"bit 40", "32-bit", "0 to 31"}, "bit of fp32");
  const std::vector<validate::ParameterShape> bf16 = {{"wte", 256, 16}};
  expect_refused<std::invalid_argument>([&] { check("bitflip:param:wte:0:16@1", bf16); }, {"bit 16", "0 to 15"},
                                        "bit of bf16");
  expect_refused<std::invalid_argument>([&] { check("bitflip:param:wte:0:3@40", fp32); },
                                        {"step 40", "past the run", "0 to 39"}, "step");
  // the model's own parameters: the micro GPT's names and sizes, fp32
  const auto shapes = validate::parameter_shapes(ampcheck::testing::micro_run("fp32", 4));
  ASSERT_FALSE(shapes.empty());
  EXPECT_EQ(shapes[0].bits, 32);
  EXPECT_TRUE(std::any_of(shapes.begin(), shapes.end(), [](const auto& s) { return s.name == "h.0.mlp.c_fc.weight"; }));
}

// The decision behind the main entry's refusal, on synthetic flag sets (this machine has AVX-512, so the SIGILL case
// itself cannot be run here).
TEST(ValidateCpuCapability, ACapabilityTheProcessorLacksIsRefused) {
  const std::set<std::string> avx2_only = {"avx2", "fma"};
  const std::set<std::string> avx512 = {"avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq"};
  const std::set<std::string> sse_only = {};
  EXPECT_EQ(engine::unsupported_cpu_capability("", avx2_only), "");
  EXPECT_EQ(engine::unsupported_cpu_capability("default", sse_only), "");
  EXPECT_EQ(engine::unsupported_cpu_capability("avx2", avx2_only), "");
  EXPECT_EQ(engine::unsupported_cpu_capability("avx512", avx512), "");
  const std::string no512 = engine::unsupported_cpu_capability("avx512", avx2_only);
  for (const char* w : {"ATEN_CPU_CAPABILITY=avx512", "avx512f", "avx512vl", "SIGILL", "HINT", "set it to avx2"})
    EXPECT_NE(no512.find(w), std::string::npos) << no512;
  // an AVX-512 CPU without AVX512BW (Knights Landing): ATen's avx512 kernels need it
  const std::set<std::string> knl = {"avx2", "fma", "avx512f"};
  EXPECT_NE(engine::unsupported_cpu_capability("avx512", knl).find("avx512bw"), std::string::npos);
  const std::string no2 = engine::unsupported_cpu_capability("avx2", sse_only);
  EXPECT_NE(no2.find("set it to default"), std::string::npos) << no2;
  // a value ATen does not know is ATen's to ignore (with its own warning); upper case is such a value
  EXPECT_EQ(engine::unsupported_cpu_capability("AVX512", sse_only), "");
  // this machine: whatever it has, the requested-capability check agrees with the decision on its own flags
  EXPECT_EQ(engine::unsupported_cpu_capability("avx2", engine::host_cpu_flags()).empty(),
            engine::host_cpu_flags().count("avx2") && engine::host_cpu_flags().count("fma"));
}

// The fingerprint holds the numerics settings of the environment, unset ones as unset; a difference in one is named
// as drift; a golden from before they were recorded counts as "unset" there.
TEST(ValidateFingerprint, NumericsEnvironmentIsRecordedAndItsDriftNamed) {
  ::setenv("MKL_CBWR", "COMPATIBLE", 1);
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  ::setenv("CUBLASLT_TEST_SETTING", "7", 1);
  std::map<std::string, std::string> fp;
  for (const auto& [k, v] : engine::stack_fingerprint(at::Device("cpu"))) fp[k] = v;
  ::unsetenv("MKL_CBWR");
  ::unsetenv("CUBLASLT_TEST_SETTING");
  EXPECT_EQ(fp["env_MKL_CBWR"], "COMPATIBLE");
  EXPECT_EQ(fp["env_ONEDNN_MAX_CPU_ISA"], engine::kUnset);
  EXPECT_EQ(fp["env_CUBLASLT_TEST_SETTING"], "7");
  for (const char* k :
       {"env_MKL_ENABLE_INSTRUCTIONS", "env_OMP_NUM_THREADS", "env_MKL_NUM_THREADS", "env_CUBLAS_WORKSPACE_CONFIG",
        "env_NVIDIA_TF32_OVERRIDE", "env_NCCL_ALGO", "env_NCCL_PROTO", "env_ATEN_CPU_CAPABILITY"})
    EXPECT_TRUE(fp.count(k)) << k;

  const validate::Fingerprint here = {{"device_class", "cpu"},
                                      {"env_MKL_CBWR", "COMPATIBLE"},
                                      {"env_ONEDNN_MAX_CPU_ISA", engine::kUnset},
                                      {"env_OMP_NUM_THREADS", "4"}};
  // an old golden: no env keys at all -> only the settings set here differ
  const auto old = validate::stack_differences({{"stack_device_class", "cpu"}}, here);
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[0].key, "env_MKL_CBWR");
  EXPECT_EQ(old[0].golden, engine::kUnset);
  EXPECT_TRUE(old[0].changes_bits);
  EXPECT_EQ(old[1].key, "env_OMP_NUM_THREADS");
  EXPECT_FALSE(old[1].changes_bits);  // validate runs on one intra-op thread
  EXPECT_EQ(validate::describe({old[0]}), "env MKL_CBWR: (unset) -> COMPATIBLE");
  // an old golden's absent CUBLAS_WORKSPACE_CONFIG is ampcheck's own deterministic default, which its runs set
  EXPECT_TRUE(validate::stack_differences({}, {{"env_CUBLAS_WORKSPACE_CONFIG", ":4096:8"}}).empty());
  EXPECT_EQ(validate::stack_differences({}, {{"env_CUBLAS_WORKSPACE_CONFIG", ":16:8"}}).size(), 1u);
  // a setting the golden had and this environment lacks
  const auto gone = validate::stack_differences({{"stack_device_class", "cpu"},
                                                 {"stack_env_MKL_CBWR", "COMPATIBLE"},
                                                 {"stack_env_OMP_NUM_THREADS", "4"},
                                                 {"stack_env_CUBLAS_FOO", "1"}},
                                                here);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].key, "env_CUBLAS_FOO");
  EXPECT_EQ(gone[0].here, engine::kUnset);
}

// A sealed golden verifies; any change to what the comparison reads, another scenario, length or configuration is
// BadGolden naming the file and the re-record HINT; an unsealed golden is refused with the seal HINT.
TEST(ValidateGolden, TheSealCatchesCorruptionForeignStaleAndShortGoldens) {
  const engine::RunConfig run = ampcheck::testing::micro_run("fp32", 4);
  const trajectory::TrajectoryFile golden = sealed_golden(run);
  const std::string path = "/golden/test-fp32.h5";
  EXPECT_NO_THROW(validate::verify_golden(golden, path, run));
  auto refused = [&](trajectory::TrajectoryFile f, const engine::RunConfig& r, const std::vector<std::string>& words,
                     const std::string& label) {
    std::vector<std::string> all = words;
    all.push_back(path);
    all.push_back("re");  // re-record / re-seal
    expect_refused<validate::BadGolden>([&] { validate::verify_golden(f, path, r); }, all, label);
  };
  {  // one bit of the loss at step 2
    auto f = golden;
    uint64_t bits;
    std::memcpy(&bits, &f.trajectory.rows[2][trajectory::kLoss], 8);
    bits ^= 1;
    std::memcpy(&f.trajectory.rows[2][trajectory::kLoss], &bits, 8);
    refused(f, run, {"checksum", "re-record the golden on a known-good machine"}, "a loss bit");
  }
  {  // one gradient digest, one attribute, one tensor name
    auto f = golden;
    f.trajectory.digests.grads[1][0] ^= 2;
    refused(f, run, {"checksum"}, "a digest");
    f = golden;
    f.attributes.stack["torch"] = "2.11.1";
    refused(f, run, {"checksum"}, "an attribute");
    f = golden;
    f.trajectory.digests.tensors[0] += "x";
    refused(f, run, {"checksum"}, "a tensor name");
  }
  {  // no checksum at all
    auto f = golden;
    f.attributes.golden_checksum.reset();
    refused(f, run, {"without a content checksum", "--seal"}, "unsealed");
  }
  {  // another scenario's golden (sealed as such)
    engine::RunConfig other = run;
    other.name = "test-other";
    refused(sealed_golden(other), run, {"of scenario 'test-other'", "'test-fp32'"}, "another scenario");
  }
  {  // a stale golden: the scenario's lr changed since
    engine::RunConfig changed = run;
    changed.optimizer.lr *= 2;
    refused(golden, changed, {"another configuration", "lr="}, "stale");
  }
  {  // another length (--steps)
    engine::RunConfig shorter = run;
    shorter.loop.steps = 2;
    refused(golden, shorter, {"4 steps", "has 2"}, "short");
  }
  // the seal survives the file: written and read back, the checksum still holds
  const std::string file = "/tmp/ampcheck-golden-test-" + std::to_string(::getpid()) + ".h5";
  trajectory::write_trajectory(file, golden, true);
  EXPECT_NO_THROW(validate::read_golden(file, run));
  std::remove(file.c_str());
  expect_refused<validate::BadGolden>([&] { validate::read_golden(file, run); }, {file, "re-record"}, "missing file");
}

// A difference in a column only (the step's tensors equal the golden's): the replays are told apart by the step's
// columns, and the message never names one digest as both the golden's and the run's.
TEST(ValidateReplay, AColumnOnlyDifferenceIsReplayedByItsColumns) {
  engine::RunConfig base = ampcheck::testing::micro_run("fp32", 5);
  base.loop.digests = true;
  engine::Trainer t(base, at::kCPU);
  ASSERT_EQ(t.run().status, engine::RunOutcome::Status::Completed);
  const trajectory::Trajectory run = t.trajectory();
  trajectory::Trajectory golden = run;
  golden.rows[2][trajectory::kGradNorm] = std::nextafter(golden.rows[2][trajectory::kGradNorm], 1e300);
  const auto cmp = validate::compare_bitwise(run, golden);
  ASSERT_EQ(cmp.step, 2) << cmp.message;
  EXPECT_EQ(cmp.tensors_differing, 0) << cmp.message;
  const std::string dir = "/tmp/ampcheck-replay-test-" + std::to_string(::getpid());
  std::system(("mkdir -p " + dir).c_str());
  const auto rep = validate::replay_step(base, at::kCPU, 2, run, golden, 2, dir);
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(rep.kind, validate::ReplayKind::Persistent)
      << rep.message;  // the replays compute the run's columns, not the edited golden's
  EXPECT_NE(rep.message.find("a column differs"), std::string::npos) << rep.message;
  EXPECT_NE(rep.message.find("reproduce the run's"), std::string::npos) << rep.message;
  EXPECT_EQ(rep.message.find("not the run ("), std::string::npos) << rep.message;
}
