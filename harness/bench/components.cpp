// Component micro-benchmarks (Google Benchmark): what the harness's own machinery costs per training step.
//   GradScaler: unscale_ + step + update on a GPT's grads, non-fused (host-side skip decision) and fused (grad_scale /
//               found_inf handed to the fused AdamW kernel, no sync); the optimizer step alone as the baseline;
//               AdamW's step with the parameter norm from its own pass against _fused_adamw_ + the norm's pass
//   Probes:     a training step with every probe (grad-element fractions, update norm, FP8 casts' counts) against
//               one without (train.probe_every 0)
//   Trajectory: flush (device rows to the host) and the HDF5 write of a trajectory
//   Verdict:    verdict::judge of a run against a reference with four noise runs
//   Fused kernels (kernels/fused.h): each against its ATen reference on the same tensors (arg 0: the fused CUDA
//               kernel where built, arg 1: the reference) — the LM head's softmax cross-entropy rows (4096 rows of
//               the GPT-2 vocabulary, bf16), the residual add + LayerNorm forward and backward (16384 × 768), the
//               bias gradients, the MLP's epilogues, the step's weight casts in one launch, the head's chunk sums;
//               a weight-gradient GEMM with 8 more input columns against the column sums it could replace
// The model comes from AMPCHECK_BENCH_PRESET (default nano on the CPU, gpt2-124m on a GPU) and the device from
// AMPCHECK_BENCH_DEVICE (auto). In CI: `ampcheck_bench_components --benchmark_min_time=0.01s` as a smoke run
// (CTest bench.components_smoke); figures come from the H200.
#include "engine/device.h"
#include "engine/engine_plan.h"
#include "engine/optimizer.h"
#include "engine/trainer.h"
#include "kernels/fused.h"
#include "kernels/gemm_epilogues.h"

#include <torch/csrc/autograd/autograd.h>
#include "trajectory/trajectory_file.h"
#include "verdict/verdict.h"

#include <ampcheck/amp/autocast.h>
#include <ampcheck/amp/grad_scaler.h>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <unistd.h>

using namespace ampcheck;

namespace {

at::Device bench_device() {
  const char* d = std::getenv("AMPCHECK_BENCH_DEVICE");
  return engine::resolve_device(d ? d : "auto");
}
std::string bench_preset(const at::Device& device) {
  const char* p = std::getenv("AMPCHECK_BENCH_PRESET");
  return p ? p : (device.is_cuda() ? "gpt2-124m" : "nano");
}

engine::RunConfig run_config(const std::string& strategy, int64_t probe_every) {
  const at::Device device = bench_device();
  engine::RunConfig cfg;
  cfg.name = "bench";
  cfg.model.preset = bench_preset(device);
  const auto mc = models::resolve_preset(cfg.model);
  cfg.data.batch_size = device.is_cuda() ? 8 : 2;
  cfg.data.seq_len = std::min<int64_t>(mc.block_size, device.is_cuda() ? 1024 : 64);
  cfg.data.corpus_tokens = 1 << 20;
  cfg.loop.steps = 1 << 20;
  cfg.loop.log_every = 10;
  cfg.loop.probe_every = probe_every;
  cfg.optimizer.fused = true;
  cfg.strategy = engine::strategy_preset(strategy);
  cfg.strategy.deterministic = false;
  return cfg;
}

// The model's parameters with fixed grads (fp32), an AdamW over them and a GradScaler whose scale stays 1 (so
// unscale_ leaves the grads as they are from one iteration to the next).
struct ScalerRig {
  std::vector<at::Tensor> params;
  std::unique_ptr<engine::Optimizer> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  explicit ScalerRig(bool fused) {
    const at::Device device = bench_device();
    engine::RunConfig cfg = run_config("fp32", 0);
    auto model = models::make_model(cfg.model);
    model->to(device, at::kFloat);
    std::vector<bool> decay;
    for (auto& p : model->parameters()) {
      params.push_back(p.tensor);
      p.tensor.mutable_grad() = at::randn_like(p.tensor) * 1e-3;
      decay.push_back(p.decay);
    }
    cfg.optimizer.fused = fused;
    opt = engine::make_optimizer(params, decay, cfg.optimizer);
    amp::GradScalerOptions o;
    o.init_scale = 1.0;
    scaler = std::make_unique<amp::GradScaler>(device.type(), o);
    scaler->scale(at::ones({}, at::TensorOptions().device(device)));  // creates the scale, as scaler.scale(loss) does
  }
};

void BM_OptimizerStepAlone(benchmark::State& state) {
  ScalerRig rig(/*fused=*/true);
  const at::Device device = bench_device();
  for (auto _ : state) {
    rig.opt->step();
    engine::synchronize(device);
  }
}
BENCHMARK(BM_OptimizerStepAlone)->Unit(benchmark::kMillisecond);

// AdamW's step with the per-step parameter norm (engine option train.fused_param_norm) on the model's parameters with
// fixed grads: arg 0 the step by kernels::adamw_square_sums_ (the project's kernel on CUDA) and the norm from the
// partials it left, arg 1 ATen's _fused_adamw_ followed by the norm's own pass (kernels::square_sum_nonfinite).
void BM_AdamWParamNorm(benchmark::State& state) {
  const at::Device device = bench_device();
  engine::RunConfig cfg = run_config("fp32", 0);
  auto model = models::make_model(cfg.model);
  model->to(device, at::kFloat);
  std::vector<at::Tensor> params;
  std::vector<bool> decay;
  for (auto& p : model->parameters()) {
    params.push_back(p.tensor);
    p.tensor.mutable_grad() = at::randn_like(p.tensor) * 1e-3;
    decay.push_back(p.decay);
  }
  const bool fused = state.range(0) == 0;
  cfg.optimizer.sum_param_squares = fused;
  auto opt = engine::make_optimizer(params, decay, cfg.optimizer);
  for (auto _ : state) {
    opt->step();
    at::Tensor norm = fused ? opt->param_square_sum().sqrt() : kernels::square_sum_nonfinite(params).first.sqrt();
    engine::synchronize(device);
  }
  state.SetLabel(!fused                                              ? "_fused_adamw_ + the norm's pass"
                 : device.is_cuda() && kernels::cuda_kernels_built() ? "AdamW kernel, norm from its partials"
                                                                     : "fused (reference here: no kernel)");
}
BENCHMARK(BM_AdamWParamNorm)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_GradScalerStep(benchmark::State& state) {
  const bool fused = state.range(0) != 0;
  ScalerRig rig(fused);
  const at::Device device = bench_device();
  for (auto _ : state) {
    rig.scaler->unscale_(*rig.opt);
    rig.scaler->step(*rig.opt);
    rig.scaler->update();
    engine::synchronize(device);
  }
  state.SetLabel(fused ? "fused AdamW: found_inf to the kernel" : "non-fused: host-side skip decision");
}
BENCHMARK(BM_GradScalerStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// One training step with every probe (arg 1) or none (arg 0): the harness's instrumentation cost.
// fast: the engine's fastest path (CUDA graphs, fused head, fused residual LayerNorm), where the probes' cost is
// the largest share of a step.
void BM_TrainStep(benchmark::State& state, const std::string& strategy, bool fast = false) {
  const at::Device device = bench_device();
  if (strategy.rfind("fp8", 0) == 0 && !device.is_cuda()) {
    state.SkipWithError("fp8 needs an FP8 GPU");
    return;
  }
  engine::RunConfig cfg = run_config(strategy, state.range(0));
  if (fast) engine::request_fast_engine(cfg);  // as --engine fast
  engine::Trainer trainer(cfg, device);
  trainer.run_until(3);
  for (auto _ : state) {
    trainer.train_step(trainer.next_step());
    trainer.flush();  // SYNC POINT: one step timed whole
  }
  state.SetLabel(state.range(0) ? "probes every step" : "no probes");
}
BENCHMARK_CAPTURE(BM_TrainStep, bf16, std::string("bf16-autocast"))->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, fp16_scaler, std::string("fp16-autocast"))
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, fp8, std::string("fp8"))->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, bf16_fast, std::string("bf16-autocast"), true)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, fp16_scaler_fast, std::string("fp16-autocast"), true)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);

kernels::Impl impl_of(const benchmark::State& state) {
  return state.range(0) == 0 ? kernels::Impl::Auto : kernels::Impl::Reference;
}
const char* impl_label(const benchmark::State& state, const at::Device& device) {
  if (state.range(0) == 1) return "ATen reference";
  return device.is_cuda() && kernels::cuda_kernels_built() ? "fused CUDA kernel" : "fused (reference here: no kernel)";
}

void BM_CrossEntropyRows(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t R = gpu ? 4096 : 64, V = gpu ? 50304 : 1000;
  const auto opts = at::TensorOptions().device(device);
  at::Tensor logits0 = (at::randn({R, V}, opts) * 3).to(gpu ? at::kBFloat16 : at::kFloat);
  at::Tensor logits = logits0.clone();
  at::Tensor targets = at::randint(V, {R}, opts.dtype(at::kLong));
  at::Tensor row = at::empty({R}, opts), factor = at::full({}, 1.0 / R, opts);
  for (auto _ : state) {
    logits.copy_(logits0);  // (in place: each iteration starts from the logits; the copy is in both arms)
    kernels::cross_entropy_rows_(logits, targets, row, factor, -100, impl_of(state));
    engine::synchronize(device);
  }
  state.SetLabel(impl_label(state, device));
}
BENCHMARK(BM_CrossEntropyRows)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_AddLayerNormForwardBackward(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t N = gpu ? 16384 : 256, C = 768;
  const auto opts = at::TensorOptions().device(device);
  const auto low = gpu ? at::kBFloat16 : at::kFloat;
  at::Tensor x = at::randn({N, C}, opts).requires_grad_(true), y = at::randn({N, C}, opts).to(low).requires_grad_(true);
  at::Tensor g = at::ones({C}, opts).requires_grad_(true), b = at::zeros({C}, opts).requires_grad_(true);
  at::Tensor ds = at::randn({N, C}, opts), dh = at::randn({N, C}, opts).to(low);
  for (auto _ : state) {
    auto [s, h] = kernels::add_layer_norm(x, y, g, b, 1e-5, low, impl_of(state));
    torch::autograd::backward({s, h}, {ds, dh});
    engine::synchronize(device);
  }
  state.SetLabel(impl_label(state, device));
}
BENCHMARK(BM_AddLayerNormForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The MLP's c_fc bias gradient with the GELU backward (kernels::bias_grad with pre): GPT-2's 16384 × 3072 in bf16 on
// a GPU; the reference is ATen's gelu_backward then sum(0).
void BM_BiasGradGelu(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t R = gpu ? 16384 : 256, C = gpu ? 3072 : 512;
  const auto opts = at::TensorOptions().device(device);
  const auto low = gpu ? at::kBFloat16 : at::kFloat;
  at::Tensor g = (at::randn({R, C}, opts) * 0.01).to(low), pre = at::randn({R, C}, opts).to(low);
  for (auto _ : state) {
    auto out = kernels::bias_grad(g, pre, impl_of(state));
    engine::synchronize(device);
  }
  state.SetLabel(impl_label(state, device));
}
BENCHMARK(BM_BiasGradGelu)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The step's weight casts (model.gemm_epilogues: kernels::cast_many): GPT-2's 96 block Linear weights and biases and
// the tied head's weight (124M fp32 values) to bf16 in one launch, against one .to() per tensor (arg 1).
void BM_CastWeights(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t C = gpu ? 768 : 64, L = gpu ? 12 : 2, V = gpu ? 50304 : 256;
  const auto opts = at::TensorOptions().device(device);
  std::vector<at::Tensor> ws;
  for (int64_t l = 0; l < L; ++l)
    for (auto shape : {std::vector<int64_t>{3 * C, C}, {3 * C}, {C, C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}})
      ws.push_back(at::randn(shape, opts));
  ws.push_back(at::randn({V, C}, opts));
  for (auto _ : state) {
    auto out = kernels::cast_many(ws, at::kBFloat16, impl_of(state));
    engine::synchronize(device);
  }
  state.SetLabel(impl_label(state, device));
}
BENCHMARK(BM_CastWeights)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The fused head's four chunk weight gradients (fp16, 50304 × 768) summed into fp32 (kernels::widen_sum), against
// adding each into fp32 zeros (arg 1).
void BM_WidenSumHeadGrads(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t V = gpu ? 50304 : 256, C = gpu ? 768 : 64;
  const auto opts = at::TensorOptions().device(device);
  std::vector<at::Tensor> parts;
  for (int k = 0; k < 4; ++k) parts.push_back((at::randn({V, C}, opts) * 0.01).to(gpu ? at::kHalf : at::kBFloat16));
  for (auto _ : state) {
    at::Tensor out = kernels::widen_sum(parts, impl_of(state));
    engine::synchronize(device);
  }
  state.SetLabel(impl_label(state, device));
}
BENCHMARK(BM_WidenSumHeadGrads)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The GPT-2 MLP (768 -> 3072 -> 768, 16384 rows; bf16 autocast on a GPU) forward and backward: the engine option
// model.gemm_epilogues (kernels::mlp_gelu_epilogues: GELU's derivative in c_proj's input-gradient GEMM, fp32 weight
// gradients from the GEMMs, column-sum bias gradients) against the stock ops (its reference).
void BM_MlpEpiloguesForwardBackward(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t N = gpu ? 16384 : 256, C = gpu ? 768 : 64, H = 4 * C;
  const auto opts = at::TensorOptions().device(device);
  at::Tensor x = at::randn({N, C}, opts).requires_grad_(true);
  at::Tensor w_fc = (at::randn({H, C}, opts) * 0.02).requires_grad_(true),
             b_fc = at::zeros({H}, opts).requires_grad_(true);
  at::Tensor w_pr = (at::randn({C, H}, opts) * 0.02).requires_grad_(true),
             b_pr = at::zeros({C}, opts).requires_grad_(true);
  at::Tensor up = at::randn({N, C}, opts).to(gpu ? at::kBFloat16 : at::kFloat);
  for (auto _ : state) {
    at::Tensor y;
    {
      std::optional<amp::AutocastGuard> ac;
      if (gpu) ac.emplace(device.type(), at::kBFloat16);
      y = kernels::mlp_gelu_epilogues(x, w_fc, b_fc, w_pr, b_pr, impl_of(state));
    }
    y.backward(up);
    engine::synchronize(device);
  }
  state.SetLabel(state.range(0) == 0 && kernels::gemm_epilogues_built() && gpu ? "cuBLASLt epilogues" : "stock ops");
}
BENCHMARK(BM_MlpEpiloguesForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// What a ones column in a block Linear's input would cost its weight-gradient GEMM (kernels::wgrad_fp32_: one cuBLASLt
// GEMM into fp32) — the bias gradient would then leave that GEMM as the extra column instead of a column-sum pass over
// the output gradient: GPT-2's shapes at 16384 rows, out × in with in = 768 and with in = 776 (8 more columns, the
// alignment cuBLASLt needs), and the column sums it would replace (in = 0: kernels::bias_grad of the same gradient).
// For the decision only; nothing uses the ones column yet.
void BM_WgradWidth(benchmark::State& state) {
  const at::Device device = bench_device();
  const bool gpu = device.is_cuda();
  const int64_t R = gpu ? 16384 : 256, out = gpu ? state.range(0) : state.range(0) / 16, in = state.range(1);
  const auto opts = at::TensorOptions().device(device);
  const auto low = gpu ? at::kBFloat16 : at::kFloat;
  at::Tensor g = (at::randn({R, out}, opts) * 0.01).to(low);
  at::Tensor x = at::randn({R, std::max<int64_t>(in, 8)}, opts).to(low);
  at::Tensor dw = at::empty({out, std::max<int64_t>(in, 8)}, opts.dtype(at::kFloat));
  for (auto _ : state) {
    if (in == 0) (void)kernels::bias_grad(g, at::Tensor());
    else
      kernels::wgrad_fp32_(dw, g, x, /*accumulate=*/false);
    engine::synchronize(device);
  }
}
BENCHMARK(BM_WgradWidth)
    ->Args({2304, 768})
    ->Args({2304, 776})
    ->Args({2304, 0})
    ->Args({3072, 768})
    ->Args({3072, 776})
    ->Args({3072, 0})
    ->Unit(benchmark::kMillisecond);

trajectory::Trajectory synthetic_trajectory(int64_t steps, double offset) {
  trajectory::Trajectory t;
  for (int64_t s = 0; s < steps; ++s) {
    std::array<double, trajectory::kNumColumns> r{};
    r[trajectory::kLoss] = 5.0 * std::exp(-0.01 * s) + offset;
    r[trajectory::kGradNorm] = 1.0 + 0.1 * std::sin(s);
    r[trajectory::kParamNorm] = 100.0 + 0.01 * s;
    r[trajectory::kUpdateNorm] = 0.01;
    r[trajectory::kLossScale] = 1.0;
    r[trajectory::kLr] = 1e-3;
    r[trajectory::kStepTimeMs] = 10.0;
    r[trajectory::kEvalLoss] = NAN;
    t.rows.push_back(r);
  }
  return t;
}

void BM_TrajectoryWrite(benchmark::State& state) {
  trajectory::TrajectoryFile f;
  f.trajectory = synthetic_trajectory(state.range(0), 0.0);
  const std::string path = "/tmp/ampcheck-bench-" + std::to_string(::getpid()) + ".h5";
  for (auto _ : state) trajectory::write_trajectory(path, f, /*overwrite=*/true);
  std::remove(path.c_str());
  state.SetLabel("HDF5, atomic (temporary file + rename)");
}
BENCHMARK(BM_TrajectoryWrite)->Arg(60)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_Verdict(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto ref = synthetic_trajectory(n, 0.0), run = synthetic_trajectory(n, 0.001);
  std::vector<verdict::NoiseRun> noise;
  for (int i = 0; i < 4; ++i) noise.push_back({"n" + std::to_string(i), synthetic_trajectory(n, 0.002 * (i - 1.5))});
  for (auto _ : state)
    benchmark::DoNotOptimize(
        verdict::judge(trajectory::RunStatus::Completed, "", run, ref, noise, verdict::Tolerance{}));
}
BENCHMARK(BM_Verdict)->Arg(60)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
