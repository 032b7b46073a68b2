// The training-loop pitfall knobs of `train:` (engine/run_config.h), each against the correct loop on the same
// micro GPT: what the pitfall does to the gradients or the run, as PyTorch would do it; the FP32 reference corrects
// every one of them without changing reference_key() (committed references stay valid). Suites are named
// EnginePitfall* / EngineReferenceKey* so that `unit.engine` runs them.
#include "test_support.h"

#include "run/scenario_run.h"
#include "reference/reference_store.h"
#include "trajectory/trajectory_file.h"
#include "scenario/scenario.h"

#include <ampcheck/amp/grad_scaler.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

using ampcheck::amp::GradScalerError;
using namespace ampcheck;
using namespace ampcheck::testing;

namespace {

// fp32 arithmetic on both sides; what differs is one multiplication or division of the loss (exact for powers of
// two, one rounding of 2^-24 relative otherwise) seen through a sum over ~30k gradient elements: 1e-5 relative
// leaves a factor of ~100 over fp32's rounding and is still 5 orders of magnitude below any pitfall's effect.
constexpr double kFp32StateRel = 1e-5;

trajectory::Trajectory run_steps(const engine::RunConfig& cfg, int64_t steps) {
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  trainer.run_until(steps);
  return trainer.trajectory();
}

// fp32 params with the dynamic GradScaler and no autocast: loss scaling in exact fp32 arithmetic.
engine::RunConfig fp32_with_scaler(int64_t steps) {
  auto cfg = micro_run("fp16-autocast", steps);
  cfg.strategy.autocast.reset();
  return cfg;
}

std::vector<at::Tensor> grads_of(engine::Trainer& t) {
  std::vector<at::Tensor> gs;
  for (const auto& p : t.model().parameters()) gs.push_back(p.tensor.grad().detach().clone());
  return gs;
}

// Runs a python snippet under the PyTorch the build links (AMPCHECK_PYTHON); returns its stdout.
std::string run_python(const std::string& code) {
  const std::string path = temp_path("pitfall_oracle.py");
  std::ofstream(path) << code;
  const std::string cmd = std::string(AMPCHECK_PYTHON) + " " + path + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 512> buf{};
  while (pipe && fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  std::remove(path.c_str());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// a. divide_loss_by_micro_batches: false

TEST(EnginePitfall, UndividedAccumulationMakesTheGradNormMicroBatchesTimesLarger) {
  auto right = micro_run("fp32", 1);
  right.loop.micro_batches = 3;  // 3: not a power of two, so the division really rounds
  auto wrong = right;
  wrong.loop.divide_loss_by_micro_batches = false;
  const auto a = run_steps(right, 1), b = run_steps(wrong, 1);
  const double want = 3.0 * a.rows[0][trajectory::kGradNorm], got = b.rows[0][trajectory::kGradNorm];
  EXPECT_NEAR(got, want, kFp32StateRel * want)
      << "step 0, grad_norm: got " << got << ", want 3 x the divided run's " << a.rows[0][trajectory::kGradNorm];
  EXPECT_EQ(b.rows[0][trajectory::kLoss], a.rows[0][trajectory::kLoss])
      << "step 0, loss: the recorded loss must stay the true mean over the micro-batches";
}

// ---------------------------------------------------------------------------------------------------------------
// b. step_through_scaler: false

TEST(EnginePitfall, DirectOptimizerStepThenUpdateRaisesPyTorchsAssertion) {
  auto cfg = micro_run("fp16-autocast", 3);
  cfg.loop.step_through_scaler = false;
  {
    engine::Trainer trainer(cfg, at::Device(at::kCPU));
    try {
      trainer.train_step(0);
      FAIL() << "optimizer.step() + scaler.update() did not raise";
    } catch (const GradScalerError& e) {
      EXPECT_EQ(e.python_type(), GradScalerError::PythonType::AssertionError) << e.what();
      EXPECT_STREQ(e.what(), "No inf checks were recorded prior to update.");
    }
  }
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::Error);
  EXPECT_EQ(out.failed_step, 0);
  // The same loop in Python, under the torch this build links: the type and text must be Python's own.
  const std::string python = run_python(R"(import torch
p = torch.nn.Parameter(torch.ones(3))
opt = torch.optim.AdamW([p], lr=1e-3)
scaler = torch.amp.GradScaler("cpu")
scaler.scale((p * p).sum()).backward()
opt.step()  # PITFALL: instead of scaler.step(opt)
try:
    scaler.update()
    print("none\t")
except Exception as e:
    print(type(e).__name__ + "\t" + str(e))
)");
  ASSERT_FALSE(python.empty()) << "the Python snippet printed nothing (" << AMPCHECK_PYTHON << ")";
  EXPECT_EQ(python, "AssertionError\t" + out.error + "\n") << "Python says: " << python;
}

TEST(EnginePitfall, DirectOptimizerStepWithoutUpdateAppliesTheScaledGradsSilently) {
  // SGD without momentum or weight decay: the update is lr x grad, so the scale shows in it one for one.
  auto right = fp32_with_scaler(2);
  right.optimizer.kind = "sgd";
  right.optimizer.momentum = 0;
  right.optimizer.weight_decay = 0;
  auto wrong = right;
  wrong.loop.step_through_scaler = false;
  wrong.loop.call_update = false;
  engine::Trainer trainer(wrong, at::Device(at::kCPU));
  const auto out = trainer.run();
  ASSERT_EQ(out.status, engine::RunOutcome::Status::Completed) << out.error;
  const auto& b = trainer.trajectory();
  const auto a = run_steps(right, 1);
  const double want = 65536.0 * a.rows[0][trajectory::kUpdateNorm], got = b.rows[0][trajectory::kUpdateNorm];
  EXPECT_NEAR(got, want, kFp32StateRel * want)
      << "step 0, update_norm: got " << got << ", want the scale (65536) x " << a.rows[0][trajectory::kUpdateNorm];
  for (int64_t s = 0; s < b.size(); ++s) {
    EXPECT_EQ(b.rows[s][trajectory::kSkipped], 0.0) << "step " << s;
    EXPECT_EQ(b.rows[s][trajectory::kLossScale], 65536.0) << "step " << s << ": no update() may change the scale";
  }
}

TEST(EnginePitfall, DirectOptimizerStepDoesNotSkipAnInfStep) {
  auto cfg = fp32_with_scaler(2);
  cfg.loop.step_through_scaler = false;
  cfg.loop.call_update = false;
  ampcheck::inject::add_injections(cfg, {grad_injection(0, INFINITY, "h.0.*", 1)});
  engine::Trainer trainer(cfg, at::Device(at::kCPU));
  const auto out = trainer.run();
  EXPECT_EQ(out.status, engine::RunOutcome::Status::NonFinite) << "the inf grad must reach the parameters";
  EXPECT_EQ(out.failed_step, 0);
  EXPECT_EQ(trainer.trajectory().rows[0][trajectory::kSkipped], 0.0);
}

// ---------------------------------------------------------------------------------------------------------------
// c. scale_loss: false

TEST(EnginePitfall, UnscaledBackwardLeavesGradsDividedByTheScale) {
  auto right = fp32_with_scaler(1);
  auto wrong = right;
  wrong.loop.scale_loss = false;
  const auto a = run_steps(right, 1), b = run_steps(wrong, 1);
  // grad_norm = (norm of the grads backward produced) / scale: with the plain loss backpropagated that is the
  // effective gradient unscale_ leaves for the optimizer, 1/65536 of the true one.
  const double want = a.rows[0][trajectory::kGradNorm] / 65536.0, got = b.rows[0][trajectory::kGradNorm];
  EXPECT_NEAR(got, want, kFp32StateRel * want)
      << "step 0, grad_norm: got " << got << ", want the true " << a.rows[0][trajectory::kGradNorm] << " / 65536";
  EXPECT_EQ(b.rows[0][trajectory::kLossScale], 65536.0) << "scaler.scale(loss) still ran: the scale exists";
  EXPECT_EQ(b.rows[0][trajectory::kSkipped], 0.0);
}

// ---------------------------------------------------------------------------------------------------------------
// d. zero_grad: false

TEST(EnginePitfall, ForgottenZeroGradAddsTheLastStepsGradsToThisOnes) {
  auto right = micro_run("fp32", 2);
  auto wrong = right;
  wrong.loop.zero_grad = false;
  engine::Trainer a(right, at::Device(at::kCPU)), b(wrong, at::Device(at::kCPU));
  a.train_step(0);
  const auto g0 = grads_of(a);
  a.train_step(1);
  const auto g1 = grads_of(a);
  b.run_until(2);  // step 0 is the same in both runs, so step 1 starts from the same parameters
  const auto got = grads_of(b);
  const auto& names = b.model().parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    const at::Tensor want = g0[i] + g1[i];
    const double err = (got[i] - want).abs().max().item<double>(), mag = want.abs().max().item<double>();
    EXPECT_LE(err, kFp32StateRel * mag) << "step 1, grad of " << names[i].name << ": max |got - (g0 + g1)| " << err
                                        << " against max |g0 + g1| " << mag;
  }
  const double right_norm = a.trajectory().rows[1][trajectory::kGradNorm];
  const double wrong_norm = b.trajectory().rows[1][trajectory::kGradNorm];
  EXPECT_EQ(b.trajectory().rows[0][trajectory::kGradNorm], a.trajectory().rows[0][trajectory::kGradNorm]) << "step 0";
  EXPECT_GT(wrong_norm, 1.5 * right_norm) << "step 1, grad_norm: got " << wrong_norm << " with the grads summed, "
                                          << right_norm << " without (early grads point the same way)";
}

// ---------------------------------------------------------------------------------------------------------------
// the FP32 reference

TEST(EngineReferenceKey, ReferenceCorrectsEveryLoopPitfallAndKeepsTheKey) {
  auto clean = micro_run("fp16-autocast", 10);
  clean.loop.micro_batches = 2;
  auto broken = clean;
  broken.loop.divide_loss_by_micro_batches = false;
  broken.loop.step_through_scaler = false;
  broken.loop.scale_loss = false;
  broken.loop.zero_grad = false;
  const engine::RunConfig r = reference::reference_run_config(broken);
  EXPECT_TRUE(r.loop.divide_loss_by_micro_batches);
  EXPECT_TRUE(r.loop.step_through_scaler);
  EXPECT_TRUE(r.loop.scale_loss);
  EXPECT_TRUE(r.loop.zero_grad);
  const auto want = reference::reference_key(clean), got = reference::reference_key(broken);
  EXPECT_EQ(got.canonical, want.canonical);
  EXPECT_EQ(got.key, want.key);
}

TEST(EngineReferenceKey, CommittedReferencesStillMatchTheKeysOfTheScenariosThatRecordedThem) {
  // Each reference stores the scenario text it was recorded for and the canonical key text: parsing that text
  // today must give the same text and the file's name — else a parser or key change made every reference stale.
  const std::string root = std::string(AMPCHECK_SOURCE_DIR) + "/references";
  int n = 0;
  for (const auto& dev : std::filesystem::directory_iterator(root)) {
    if (!dev.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(dev.path())) {
      if (f.path().extension() != ".h5") continue;
      const auto file = trajectory::read_trajectory(f.path().string());
      const auto attrs = trajectory::attribute_map(file.attributes);
      ASSERT_TRUE(attrs.count("scenario_text") && attrs.count("reference_canonical")) << f.path();
      const auto sc = scenario::parse_scenario(attrs.at("scenario_text"),
                                               attrs.count("scenario_path") ? attrs.at("scenario_path") : "?");
      const auto key = reference::reference_key(sc.run);
      EXPECT_EQ(key.canonical, attrs.at("reference_canonical")) << f.path();
      EXPECT_EQ(key.key, f.path().stem().string()) << f.path() << " (" << sc.run.name << ")";
      ++n;
    }
  }
  EXPECT_GT(n, 0) << "no committed reference found under " << root;
}

// `--steps N` shorter than the scenario must not drop a planted event silently (the scenario's own steps were
// checked when it was parsed).
TEST(EngineScenarioRun, StepsOverrideShorterThanAnInjectionIsAnError) {
  const auto sc =
      ampcheck::scenario::load_scenario(std::string(AMPCHECK_SOURCE_DIR) + "/scenarios/fp16-autocast-overflow.yaml");
  try {
    ampcheck::run::train_scenario(sc, "cpu", 10);
    FAIL() << "a run of 10 steps cannot hold the injection at step 40";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("inject[0] fires at step 40, outside a run of --steps 10"), std::string::npos)
        << e.what();
  }
}
