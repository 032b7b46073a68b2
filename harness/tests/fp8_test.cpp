// FP8 matmuls (engine/fp8): the casts' scales and probes, the FP8 Linear's forward and backward against FP32, the
// strategies through the Trainer, the exactness of the planted spike, the probes' file round trip and signals.
// On the CPU the Fp8Matmuls run on torch's CPU _scaled_mm (Fp8Config::emulate_on_cpu, a test-only switch): the same
// casts and the same matmul semantics, without FP8 hardware. The strategy itself is "unsupported here" on the CPU
// (tested below, and by the ci suite's fp8-unsupported-on-cpu scenario). Cuda* twins run on an FP8 GPU.
#include "test_support.h"

#include "engine/device.h"
#include "engine/fp8.h"
#include "trajectory/trajectory_file.h"
#include "verdict/events.h"
#include "verdict/words.h"

#include <unistd.h>

#include <cmath>

using namespace ampcheck;
using namespace ampcheck::testing;

namespace {

engine::Fp8Config fp8_config(engine::Fp8Scaling scaling, int64_t history = 4) {
  engine::Fp8Config c;
  c.scaling = scaling;
  c.history = history;
  c.emulate_on_cpu = true;
  return c;
}

// One site "h.0.mlp.c_fc": casts 0 (x), 1 (w), 2 (grad).
engine::Fp8Matmuls one_site(engine::Fp8Scaling scaling, const at::Device& device = at::kCPU, int64_t history = 4) {
  return engine::Fp8Matmuls(fp8_config(scaling, history), {"h.0.mlp.c_fc"}, device);
}

// probes of the last step: (casts, 3) = saturated, flushed, scale
std::vector<std::vector<double>> probes_of_step(engine::Fp8Matmuls& m) {
  m.end_step();
  trajectory::Fp8Probes p;
  m.flush_into(p);
  return {p.saturated.back(), p.flushed.back(), p.scale.back()};
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble).cpu() - want.to(at::kDouble).cpu()).norm() / want.to(at::kDouble).cpu().norm())
      .item<double>();
}

TEST(Fp8, FormatLimits) {
  EXPECT_EQ(engine::fp8_format(at::kFloat8_e4m3fn).max, 448.0);
  EXPECT_EQ(engine::fp8_format(at::kFloat8_e5m2).max, 57344.0);
  // the limits are the dtypes' own: max round-trips, and half the smallest subnormal rounds to zero
  for (auto dt : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
    const auto f = engine::fp8_format(dt);
    at::Tensor t =
        at::tensor({f.max, f.smallest_subnormal, f.smallest_subnormal / 2}, at::kFloat).to(dt).to(at::kDouble);
    EXPECT_EQ(t[0].item<double>(), f.max) << f.name;
    EXPECT_EQ(t[1].item<double>(), f.smallest_subnormal) << f.name;
    EXPECT_EQ(t[2].item<double>(), 0.0) << f.name;
  }
}

// Current scaling puts the amax at the format's max; the round trip keeps e4m3's 3 mantissa bits: relative error at
// most 2^-4 per element in the normal range. Nothing saturates or flushes: the data are N(0, 1) with magnitudes
// floored at 0.01, so the smallest scaled element is 448 * 0.01 / amax (> 0.5 for any amax below 8.96, far above half
// e4m3's smallest subnormal, 2^-10). Without the floor a draw flushes one element of 4096 in about 2.5% of seeds (an
// |z| below ~7.6e-6 scales under 2^-10) — the probe then rightly counts it, which is why the data must exclude it.
TEST(Fp8, CurrentScalingRoundTrip) {
  auto m = one_site(engine::Fp8Scaling::Current);
  m.begin_step(true);
  at::manual_seed(11);
  at::Tensor z = at::randn({64, 64}, at::TensorOptions().dtype(at::kFloat));
  ASSERT_LT(z.abs().max().item<double>(), 8.96);
  at::Tensor x = z.sign() * z.abs().clamp_min(0.01) * 1e-3;  // fp8 without a scale: subnormal
  auto q = m.quantize(0, x);
  at::Tensor back = q.data.to(at::kFloat) * q.inv_scale;
  const double amax = x.abs().max().item<double>();
  EXPECT_NEAR((q.data.to(at::kFloat).abs().max()).item<double>(), 448.0, 448.0 * 0.0625);
  EXPECT_NEAR(q.inv_scale.item<double>(), amax / 448.0, amax / 448.0 * 1e-6);
  at::Tensor big = x.abs() > amax * 0.0625;  // well inside the normal range after scaling
  EXPECT_LE(((back - x).abs() / x.abs()).masked_select(big).max().item<double>(), 0.0625 + 1e-6);
  const auto p = probes_of_step(m);
  EXPECT_EQ(p[0][0], 0.0);  // the amax lands on the max: representable, not saturated
  EXPECT_EQ(p[1][0], 0.0);
}

// Without a scale: values near 1e-4 flush to zero (half e4m3's smallest subnormal is ~1e-3), values past 448 become
// NaN (e4m3fn has no inf) — both counted.
TEST(Fp8, NoScalingFlushesAndOverflows) {
  auto m = one_site(engine::Fp8Scaling::None);
  m.begin_step(true);
  at::Tensor small = at::full({32, 32}, 1e-4);
  at::Tensor large = at::full({32, 32}, 1e3);
  large.narrow(0, 0, 8).fill_(1.0);  // a quarter representable
  auto qs = m.quantize(0, small);
  EXPECT_EQ(qs.data.to(at::kFloat).abs().max().item<double>(), 0.0);
  auto ql = m.quantize(1, large);
  EXPECT_TRUE(at::isnan(ql.data.to(at::kFloat)).any().item<bool>());
  const auto p = probes_of_step(m);
  EXPECT_EQ(p[1][0], 1.0);   // x: every element flushed
  EXPECT_EQ(p[0][1], 0.75);  // w: three quarters past the max
  EXPECT_EQ(p[2][0], 1.0);   // scale 1
}

// Delayed scaling: the first cast uses its own amax; later casts the history's max, so a x1024 spike after a
// calm history saturates nearly everything — and, the spike now in the history, the next cast does not.
TEST(Fp8, DelayedScalingLagsASpike) {
  auto m = one_site(engine::Fp8Scaling::Delayed, at::kCPU, /*history=*/4);
  at::Tensor x = at::randn({64, 64});
  for (int i = 0; i < 3; ++i) {
    m.begin_step(true);
    m.quantize(0, x);
    EXPECT_LE(probes_of_step(m)[0][0], 1.0 / 4096) << "calm step " << i;
  }
  m.begin_step(true);
  m.quantize(0, x * 1024.0);
  const auto spike = probes_of_step(m);
  EXPECT_GT(spike[0][0], 0.9) << "a x1024 spike on a stale scale saturates";
  EXPECT_NEAR(spike[2][0], 448.0 / x.abs().max().item<double>(), 1e-3 * spike[2][0]) << "the scale of the calm steps";
  m.begin_step(true);
  m.quantize(0, x * 1024.0);
  EXPECT_LE(probes_of_step(m)[0][0], 1.0 / 4096) << "the spike's amax is in the history now";
  // current scaling absorbs the spike at once
  auto c = one_site(engine::Fp8Scaling::Current);
  c.begin_step(true);
  c.quantize(0, x);
  c.quantize(0, x * 1024.0);
  EXPECT_LE(probes_of_step(c)[0][0], 1.0 / 4096);
}

// The FP8 Linear against at::linear in FP32 (fp64 check): forward, dgrad and wgrad within FP8's error — per-tensor
// e4m3 with 3 mantissa bits gives a few percent relative error (the GPU measured 3.8% for a large product); bf16's is
// ~0.3%, so the bound also shows the matmul really ran in FP8.
void check_linear_against_fp32(const at::Device& device) {
  auto m = one_site(engine::Fp8Scaling::Current, device);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::manual_seed(3);
  at::Tensor x = at::randn({128, 64}, opts).requires_grad_(true);
  at::Tensor w = (at::randn({96, 64}, opts) * 0.02).requires_grad_(true);
  at::Tensor b = at::randn({96}, opts).requires_grad_(true);
  at::Tensor g = at::randn({128, 96}, opts) * 1e-4;
  m.begin_step(true);
  at::Tensor y = m.linear(0, x, w, b);
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.backward(g.to(at::kBFloat16));
  at::Tensor x64 = x.detach().to(at::kDouble).requires_grad_(true),
             w64 = w.detach().to(at::kDouble).requires_grad_(true);
  at::Tensor y64 = at::linear(x64, w64, b.detach().to(at::kDouble));
  y64.backward(g.to(at::kDouble));
  const double ey = rel_err(y, y64), edx = rel_err(x.grad(), x64.grad()), edw = rel_err(w.grad(), w64.grad());
  EXPECT_LT(ey, 0.08);
  EXPECT_LT(edx, 0.12);  // e5m2 output gradient: 2 mantissa bits
  EXPECT_LT(edw, 0.12);
  EXPECT_GT(edx, 0.004) << "dgrad as accurate as bf16: the backward did not run in FP8";
  EXPECT_EQ(x.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  EXPECT_TRUE(b.grad().defined());
  const auto p = probes_of_step(m);
  for (int c = 0; c < 3; ++c) {
    EXPECT_LE(p[0][c], 1.0 / 1024) << c;
    EXPECT_TRUE(std::isfinite(p[2][c]) && p[2][c] > 0) << c;
  }
  EXPECT_GT(p[2][2], 1e4) << "the gradient (1e-4) is scaled up into e5m2's range";
}

TEST(Fp8, LinearForwardBackwardAgainstFp32) { check_linear_against_fp32(at::kCPU); }

TEST(Fp8, StrategyIsUnsupportedOnTheCpu) {
  engine::RunConfig cfg = micro_run("fp8");
  try {
    engine::Trainer trainer(cfg, at::kCPU);
    FAIL() << "the fp8 strategy ran on the CPU";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "unsupported here: strategy 'fp8' needs FP8 tensor cores (a CUDA GPU of compute capability >= 8.9, Ada or "
        "Hopper); the CPU has none. ampcheck does not fall back to bf16");
  }
}

engine::RunConfig fp8_micro(engine::Fp8Scaling scaling, int64_t steps = 12) {
  engine::RunConfig cfg = micro_run("fp8", steps);
  cfg.data.batch_size = 8;  // 8 x 32 rows: a multiple of 16
  cfg.strategy.fp8->scaling = scaling;
  cfg.strategy.fp8->emulate_on_cpu = true;
  return cfg;
}

// Through the Trainer: every block Linear is an FP8 site (3 casts each), probes land in the trajectory, the run trains.
TEST(Fp8, TrainerRecordsProbesAndTrains) {
  constexpr size_t kSteps = 8;  // (the CPU's FP8 emulation is slow: ~1 s a step under ASan)
  engine::Trainer trainer(fp8_micro(engine::Fp8Scaling::Current, kSteps), at::kCPU);
  const auto out = trainer.run();
  ASSERT_EQ(out.status, engine::RunOutcome::Status::Completed) << out.error;
  const auto& t = trainer.trajectory();
  ASSERT_EQ(t.fp8.casts.size(), 2u * 4u * 3u);
  EXPECT_EQ(t.fp8.casts[0], "h.0.attn.c_attn.x");
  EXPECT_EQ(t.fp8.casts[5], "h.0.attn.c_proj.grad");
  ASSERT_EQ(t.fp8.saturated.size(), kSteps);
  for (size_t s = 0; s < kSteps; ++s)
    for (size_t c = 0; c < t.fp8.casts.size(); ++c) {
      EXPECT_TRUE(std::isfinite(t.fp8.saturated[s][c]) && t.fp8.saturated[s][c] < 0.01) << s << " " << t.fp8.casts[c];
      EXPECT_TRUE(std::isfinite(t.fp8.flushed[s][c])) << s << " " << t.fp8.casts[c];
      EXPECT_GT(t.fp8.scale[s][c], 0) << s << " " << t.fp8.casts[c];
    }
  EXPECT_LT(t.rows.back()[trajectory::kLoss], t.rows.front()[trajectory::kLoss]);
}

// The Llama through the same MatmulOverride: its 7 block Linears per layer are FP8 sites (q, k, v, o, gate, up,
// down; 3 casts each), HF's names in the probes; with layers "all" the untied lm_head and the embedding lookup too.
TEST(Fp8, LlamaBlockLinearsRunInFp8AndTrain) {
  engine::RunConfig cfg = fp8_micro(engine::Fp8Scaling::Current, 4);  // (the CPU's FP8 emulation is slow)
  cfg.model.kind = "llama";
  cfg.model.preset = "llama-micro";
  cfg.model.n_layer = 1;
  cfg.strategy.fp8->layers = "all";
  engine::Trainer trainer(cfg, at::kCPU);
  const auto out = trainer.run();
  ASSERT_EQ(out.status, engine::RunOutcome::Status::Completed) << out.error;
  const auto& t = trainer.trajectory();
  ASSERT_EQ(t.fp8.casts.size(), 7u * 3u + 3u + 1u);  // 1 layer x 7 Linears, lm_head, the lookup's table
  EXPECT_EQ(t.fp8.casts[0], "model.layers.0.self_attn.q_proj.x");
  EXPECT_EQ(t.fp8.casts[20], "model.layers.0.mlp.down_proj.grad");
  EXPECT_EQ(t.fp8.casts.back(), "model.embed_tokens.w");
  for (size_t c = 0; c < t.fp8.casts.size(); ++c) EXPECT_GT(t.fp8.scale[0][c], 0) << t.fp8.casts[c];
  EXPECT_LT(t.rows.back()[trajectory::kLoss], t.rows.front()[trajectory::kLoss]);
}

// probe_every 3: fractions on steps 0 and 3 only (4 steps: the CPU's FP8 emulation is slow); the scale on every step.
TEST(Fp8, ProbesFollowProbeEvery) {
  engine::RunConfig cfg = fp8_micro(engine::Fp8Scaling::Delayed, 4);
  cfg.loop.probe_every = 3;
  engine::Trainer trainer(cfg, at::kCPU);
  ASSERT_EQ(trainer.run().status, engine::RunOutcome::Status::Completed);
  const auto& t = trainer.trajectory();
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(std::isfinite(t.fp8.saturated[s][0]), s % 3 == 0) << s;
    EXPECT_TRUE(std::isfinite(t.fp8.scale[s][0])) << s;
  }
}

// The planted spike (c_fc input x K, output / K) changes nothing in FP32 for a power of two: bit-identical
// trajectories — so whatever an FP8 run does at a spike is its number format's doing.
TEST(Fp8, PlantedSpikeIsExactInFp32) {
  engine::RunConfig plain = micro_run("fp32", 8), spiked = plain;
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::ActivationScale;
  c.at = models::ActivationSite::MlpInputSpike;
  c.factor = 1024;
  c.block = 1;
  c.steps = {2, 5};
  ampcheck::inject::set_injections(spiked, {c});
  engine::Trainer a(plain, at::kCPU), b(spiked, at::kCPU);
  a.run();
  b.run();
  expect_identical_trajectories(a.trajectory(), b.trajectory());
  EXPECT_EQ(b.trajectory().events.size(), 2u);
}

// The spike on a delayed-scaling run saturates that block's c_fc input at the spike steps; current scaling does not.
// (Step 3 of 4: the delayed scale has 3 steps of history by then; the CPU's FP8 emulation is slow.)
TEST(Fp8, SpikeSaturatesOnlyADelayedScale) {
  inject::InjectionConfig c;
  c.kind = inject::InjectionKind::ActivationScale;
  c.at = models::ActivationSite::MlpInputSpike;
  c.factor = 1024;
  c.block = 1;
  c.steps = {3};
  for (auto scaling : {engine::Fp8Scaling::Delayed, engine::Fp8Scaling::Current}) {
    engine::RunConfig cfg = fp8_micro(scaling, 4);
    ampcheck::inject::set_injections(cfg, {c});
    engine::Trainer trainer(cfg, at::kCPU);
    ASSERT_EQ(trainer.run().status, engine::RunOutcome::Status::Completed);
    const auto& t = trainer.trajectory();
    const size_t idx = std::find(t.fp8.casts.begin(), t.fp8.casts.end(), "h.1.mlp.c_fc.x") - t.fp8.casts.begin();
    ASSERT_LT(idx, t.fp8.casts.size());
    if (scaling == engine::Fp8Scaling::Delayed) EXPECT_GT(t.fp8.saturated[3][idx], 0.5);
    else
      EXPECT_LT(t.fp8.saturated[3][idx], 0.01);
    EXPECT_LT(t.fp8.saturated[2][idx], 0.01);
  }
}

// Delayed scaling's amax histories travel in checkpoints: a run restarted from a checkpoint at step 2 is bit-identical
// to an uninterrupted one (its scales come from the same histories: 2 steps of them at the restart).
TEST(Fp8, DelayedScalingResumesBitIdentically) {
  engine::RunConfig plain = fp8_micro(engine::Fp8Scaling::Delayed, 4), resumed = plain;
  resumed.loop.resume_at = 2;
  engine::Trainer a(plain, at::kCPU), b(resumed, at::kCPU);
  ASSERT_EQ(a.run().status, engine::RunOutcome::Status::Completed);
  ASSERT_EQ(b.run().status, engine::RunOutcome::Status::Completed);
  expect_identical_trajectories(a.trajectory(), b.trajectory());
  EXPECT_EQ(a.trajectory().fp8.scale, b.trajectory().fp8.scale);
}

TEST(Fp8, ProbesRoundTripThroughTheTrajectoryFile) {
  engine::Trainer trainer(fp8_micro(engine::Fp8Scaling::Current, 4), at::kCPU);
  trainer.run();
  trajectory::TrajectoryFile f;
  f.trajectory = trainer.trajectory();
  const std::string path = "/tmp/ampcheck-fp8-test-" + std::to_string(::getpid()) + ".h5";
  trajectory::write_trajectory(path, f, true);
  const auto back = trajectory::read_trajectory(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.trajectory.fp8.casts, f.trajectory.fp8.casts);
  EXPECT_EQ(back.trajectory.fp8.saturated, f.trajectory.fp8.saturated);
  EXPECT_EQ(back.trajectory.fp8.flushed, f.trajectory.fp8.flushed);
  EXPECT_EQ(back.trajectory.fp8.scale, f.trajectory.fp8.scale);
}

// The signals name the cast and the fraction; flushed is smoothed, saturated is not.
TEST(Fp8, SignalsNameTheCastAndTheFraction) {
  trajectory::Trajectory t;
  t.rows.resize(20);
  t.fp8.casts = {"h.0.mlp.c_fc.x", "h.0.mlp.c_fc.grad"};
  for (int s = 0; s < 20; ++s) {
    t.fp8.saturated.push_back({s == 12 ? 0.9 : 0.0, 0.0});
    t.fp8.flushed.push_back({0.0, s >= 5 ? 0.6 : 0.001});  // flushed from step 5 on: smoothed, out at step 7
    t.fp8.scale.push_back({2.0, 1.0});
  }
  verdict::Tolerance tol;
  auto sat = verdict::fp8_signal(true, t, tol);
  sat.message = verdict::clause(sat);
  ASSERT_TRUE(sat.fired);
  EXPECT_EQ(sat.verdict, "diverges");
  EXPECT_EQ(sat.first_step, 12);
  EXPECT_NE(sat.message.find("90% of h.0.mlp.c_fc.x saturated at step 12"), std::string::npos) << sat.message;
  auto fl = verdict::fp8_signal(false, t, tol);
  fl.message = verdict::clause(fl);
  ASSERT_TRUE(fl.fired);
  EXPECT_EQ(fl.verdict, "stalls");
  EXPECT_EQ(fl.first_step, 7);  // trailing mean of 10: (3 x 0.6 + 5 x 0.001) / 8 = 0.23 > 0.2 at step 7
  EXPECT_NE(fl.message.find("of h.0.mlp.c_fc.grad flushed to zero"), std::string::npos) << fl.message;
  trajectory::Trajectory none;
  none.rows.resize(3);
  EXPECT_FALSE(verdict::fp8_signal(true, none, tol).judged);
}

// --- on an FP8 GPU -------------------------------------------------------------------------------------------

bool fp8_gpu() {
  if (!at::hasCUDA()) return false;
  const auto info = engine::device_info(at::Device(at::kCUDA, 0));
  return info.compute_capability_major * 10 + info.compute_capability_minor >= 89;
}

TEST(CudaFp8, LinearForwardBackwardAgainstFp32) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA GPU with FP8 (compute capability >= 8.9)";
  check_linear_against_fp32(at::Device(at::kCUDA, 0));
}

TEST(CudaFp8, StrategyTrainsAndProbes) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA GPU with FP8 (compute capability >= 8.9)";
  for (auto scaling : {engine::Fp8Scaling::Current, engine::Fp8Scaling::Delayed}) {
    engine::RunConfig cfg = fp8_micro(scaling, 12);
    cfg.strategy.fp8->emulate_on_cpu = false;
    engine::Trainer trainer(cfg, at::Device(at::kCUDA, 0));
    const auto out = trainer.run();
    ASSERT_EQ(out.status, engine::RunOutcome::Status::Completed) << out.error;
    EXPECT_LT(trainer.trajectory().rows.back()[trajectory::kLoss],
              trainer.trajectory().rows.front()[trajectory::kLoss]);
    EXPECT_EQ(trainer.trajectory().fp8.saturated.size(), 12u);
  }
}

}  // namespace
