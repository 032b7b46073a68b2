// `ampcheck validate`'s pieces (validate/validate.h): tensor digests and the bitwise comparison that names the first
// differing step and tensor, the replay that tells a transient fault from a persistent difference, golden classes and
// their nearest neighbours, the fingerprint comparison, --plant's parser; the digests in trajectory files; and the
// references' `skip` noise run (LoopConfig::delay_steps).
#include "engine/digest.h"
#include "engine/trainer.h"
#include "trajectory/trajectory_file.h"
#include "test_support.h"
#include "validate/validate.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace ampcheck;

namespace {
trajectory::Trajectory train(engine::RunConfig cfg) {
  cfg.loop.digests = true;
  engine::Trainer t(cfg, at::kCPU);
  EXPECT_EQ(t.run().status, engine::RunOutcome::Status::Completed);
  return t.trajectory();
}
std::string scratch() {
  std::string d = "/tmp/ampcheck-validate-test-" + std::to_string(::getpid());
  std::system(("mkdir -p " + d).c_str());
  return d;
}
}  // namespace

TEST(ValidateDigest, ADigestSeesOneBitDtypeAndShape) {
  const at::Tensor a = at::arange(12, at::kFloat);
  at::Tensor b = a.clone();
  EXPECT_EQ(engine::tensor_digest(a), engine::tensor_digest(b));
  b.view(at::kInt)[5].bitwise_xor_(1);  // the lowest mantissa bit of one element
  EXPECT_NE(engine::tensor_digest(a), engine::tensor_digest(b));
  EXPECT_NE(engine::tensor_digest(a), engine::tensor_digest(a.view({3, 4})));
  EXPECT_NE(engine::tensor_digest(a), engine::tensor_digest(a.view(at::kInt)));
  EXPECT_EQ(engine::tensor_digest(at::Tensor()), 0u);
}

// Two runs of one configuration are bit for bit the same; a flip of the lowest mantissa bit of one element of one
// parameter at step 3 is named: the step, and that parameter as the first tensor that differs (its gradient at step 3
// was computed before the flip and is the same).
TEST(ValidateBitwise, IdenticalRunsAndTheFirstFlippedTensorNamed) {
  const engine::RunConfig base = ampcheck::testing::micro_run("fp32", 8);
  const auto a = train(base), b = train(base);
  ASSERT_FALSE(a.digests.empty());
  EXPECT_EQ(a.digests.params.size(), 8u);
  const auto same = validate::compare_bitwise(a, b);
  EXPECT_TRUE(same.identical) << same.message;
  EXPECT_EQ(same.step, -1);

  engine::RunConfig flipped = base;
  ampcheck::inject::set_injections(
      flipped, {ampcheck::testing::bitflip_injection(3, "h.0.mlp.c_fc.weight", 0, 0, /*param=*/true)});
  const auto c = train(flipped);
  const auto cmp = validate::compare_bitwise(c, a);
  EXPECT_FALSE(cmp.identical);
  EXPECT_EQ(cmp.step, 3) << cmp.message;
  EXPECT_EQ(cmp.tensor, "parameter h.0.mlp.c_fc.weight") << cmp.message;
  EXPECT_NE(cmp.message.find("step 3"), std::string::npos) << cmp.message;

  // a gradient flip at step 2 is named as the gradient (gradients are compared before parameters)
  engine::RunConfig grad_flip = base;
  ampcheck::inject::set_injections(grad_flip, {ampcheck::testing::bitflip_injection(2, "wpe", 1, 3, /*param=*/false)});
  const auto g = validate::compare_bitwise(train(grad_flip), a);
  EXPECT_EQ(g.step, 2) << g.message;
  EXPECT_EQ(g.tensor, "gradient of wpe") << g.message;
}

// The replay: a flip planted in the run and in its replays reproduces (persistent); one planted in the run only does
// not — the replays give the golden's digest (transient). No plant: the replays give the golden's digest too.
TEST(ValidateReplay, PersistentAndTransientFlipsAreToldApart) {
  const engine::RunConfig base = ampcheck::testing::micro_run("fp32", 6);
  const auto golden = train(base);
  const validate::Plant persistent = validate::parse_plant("bitflip:param:h.1.attn.c_proj.weight:4:20@3");
  const validate::Plant transient = validate::parse_plant("bitflip:param:h.1.attn.c_proj.weight:4:20@3:transient");
  const std::string dir = scratch();
  for (const auto* plant : {&persistent, &transient}) {
    const auto run = train(validate::planted(base, {*plant}, /*replay=*/false));
    const auto cmp = validate::compare_bitwise(run, golden);
    ASSERT_EQ(cmp.step, 3) << cmp.message;
    const auto rep = validate::replay_step(validate::planted(base, {*plant}, /*replay=*/true), at::kCPU, cmp.step, run,
                                           golden, 3, dir);
    ASSERT_EQ(rep.digests.size(), 3u);
    EXPECT_EQ(rep.kind, plant->transient ? validate::ReplayKind::Transient : validate::ReplayKind::Persistent)
        << rep.message;
    for (uint64_t d : rep.digests) EXPECT_EQ(d, plant->transient ? rep.golden_digest : rep.run_digest) << rep.message;
  }
  // the checkpoint replay itself is exact: a clean step replayed from the checkpoint is the golden's
  const auto clean = validate::replay_step(base, at::kCPU, 4, golden, golden, 2, dir);
  for (uint64_t d : clean.digests) EXPECT_EQ(d, clean.golden_digest);
  std::system(("rm -rf " + dir).c_str());
}

TEST(ValidatePlant, ParsesFaultsAndNamesWhatIsExpected) {
  const auto p = validate::parse_plant("bitflip:grad:h.*:7:30@12:transient");
  ASSERT_EQ(p.injections.size(), 1u);
  EXPECT_FALSE(p.injections[0].flip_param);
  EXPECT_EQ(p.injections[0].params, "h.*");
  EXPECT_EQ(p.injections[0].element, 7);
  EXPECT_EQ(p.injections[0].bit, 30);
  EXPECT_EQ(p.injections[0].steps, std::vector<int64_t>{12});
  EXPECT_TRUE(p.transient);
  EXPECT_TRUE(validate::parse_plant("tf32").stack.tf32);
  EXPECT_TRUE(validate::parse_plant("matmul-bf16").stack.matmul_bf16);
  for (const char* bad :
       {"bitflip:param:wte:1:30", "bitflip:weights:wte:1:2@3", "bitflip:param:wte:-1:2@3", "bitflip:param:wte:1:64@3",
        "bitflip:param:wte:1:2@3:sometimes", "cosmic-ray", "tf32:transient"}) {
    try {
      validate::parse_plant(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // planted(): a transient plant is in the run, not in its replays
  const engine::RunConfig base = ampcheck::testing::micro_run("fp32", 2);
  EXPECT_EQ(ampcheck::inject::injections(validate::planted(base, {p}, false)).size(), 1u);
  EXPECT_EQ(ampcheck::inject::injections(validate::planted(base, {p}, true)).size(), 0u);
}

TEST(ValidateClasses, GoldenClassAndNearestClasses) {
  EXPECT_EQ(validate::golden_class({{"device_class", "cpu"}, {"aten_cpu_capability", "AVX512"}}), "cpu-avx512");
  EXPECT_EQ(validate::golden_class({{"device_class", "cuda-sm90"}, {"aten_cpu_capability", "AVX2"}}), "cuda-sm90");
  const std::vector<std::string> have = {"cpu-avx2", "cuda-sm80", "cuda-sm90", "cpu-avx512", "cuda-sm100"};
  EXPECT_EQ(validate::nearest_classes("cuda-sm89", have),
            (std::vector<std::string>{"cuda-sm80", "cuda-sm90", "cuda-sm100", "cpu-avx2", "cpu-avx512"}));
  EXPECT_EQ(validate::nearest_classes("cuda-sm90", have),
            (std::vector<std::string>{"cuda-sm80", "cuda-sm100", "cpu-avx2", "cpu-avx512"}));
  EXPECT_EQ(validate::nearest_classes("cpu-default", have),
            (std::vector<std::string>{"cpu-avx2", "cpu-avx512", "cuda-sm80", "cuda-sm90", "cuda-sm100"}));
}

TEST(ValidateFingerprint, DifferencesNamedAndWhichChangeBits) {
  const std::map<std::string, std::string> golden = {
      {"stack_torch", "2.11.0"}, {"stack_cpu_model", "AMD EPYC"}, {"stack_nvidia_driver", "580"}};
  const validate::Fingerprint here = {
      {"torch", "2.11.0"}, {"cpu_model", "Intel Xeon"}, {"nvidia_driver", "590"}, {"cublas", "13.1.0"}};
  const auto d = validate::stack_differences(golden, here);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "cpu_model");
  EXPECT_TRUE(d[0].changes_bits);
  EXPECT_EQ(d[1].key, "nvidia_driver");
  EXPECT_FALSE(d[1].changes_bits);
  EXPECT_EQ(d[2].golden, "(not recorded)");
  EXPECT_EQ(validate::describe(d).substr(0, 34), "cpu_model: AMD EPYC -> Intel Xeon;");
  // on a GPU the host's CPU model does not reach the run's bits; its ATen CPU capability does (initial weights)
  const validate::Fingerprint gpu = {
      {"device_class", "cuda-sm90"}, {"cpu_model", "Intel Xeon"}, {"aten_cpu_capability", "AVX2"}};
  const auto dg = validate::stack_differences(
      {{"stack_device_class", "cuda-sm90"}, {"stack_cpu_model", "AMD EPYC"}, {"stack_aten_cpu_capability", "AVX512"}},
      gpu);
  ASSERT_EQ(dg.size(), 2u);
  EXPECT_FALSE(dg[0].changes_bits);
  EXPECT_TRUE(dg[1].changes_bits);
}

// Digests travel through the trajectory file; a /digests dataset of the wrong shape is an error naming it.
TEST(ValidateDigest, DigestsRoundTripThroughTheFileAndBadShapesAreNamed) {
  const auto t = train(ampcheck::testing::micro_run("fp32", 3));
  const std::string dir = scratch(), path = dir + "/t.h5";
  trajectory::TrajectoryFile f;
  f.trajectory = t;
  trajectory::write_trajectory(path, f, true);
  const auto back = trajectory::read_trajectory(path);
  EXPECT_EQ(back.trajectory.digests.tensors, t.digests.tensors);
  EXPECT_EQ(back.trajectory.digests.params, t.digests.params);
  EXPECT_EQ(back.trajectory.digests.grads, t.digests.grads);
  EXPECT_TRUE(validate::compare_bitwise(back.trajectory, t).identical);
  f.trajectory.digests.tensors.pop_back();  // one name fewer than the rows have columns: ragged, refused to write
  EXPECT_THROW(trajectory::write_trajectory(dir + "/bad.h5", f, true), std::runtime_error);
  std::system(("rm -rf " + dir).c_str());
}

// The references' `skip` noise run: the first optimizer step is skipped as a GradScaler skips one — counted as
// skipped, nothing stepped — and the rest of the run trains as usual.
TEST(EngineDelay, DelayStepsSkipsTheFirstStep) {
  engine::RunConfig cfg = ampcheck::testing::micro_run("fp32", 4);
  cfg.loop.delay_steps = 1;
  const auto t = train(cfg);
  const auto plain = train(ampcheck::testing::micro_run("fp32", 4));
  EXPECT_EQ(t.rows[0][trajectory::kSkipped], 1.0);
  EXPECT_EQ(t.rows[0][trajectory::kUpdateNorm], 0.0);
  EXPECT_EQ(t.rows[1][trajectory::kSkipped], 0.0);
  EXPECT_GT(t.rows[1][trajectory::kUpdateNorm], 0.0);
  EXPECT_EQ(t.rows[0][trajectory::kLoss], plain.rows[0][trajectory::kLoss]);  // the same first forward
  EXPECT_NE(t.rows[1][trajectory::kLoss], plain.rows[1][trajectory::kLoss]);  // then one step behind
}
