// Training-step throughput of the ampcheck engine: a GPT preset trained with a strategy for warm-up + measured
// steps; prints one JSON line with tokens/s, TFLOP/s (Model::training_flops_per_token: 6 per matmul weight +
// attention 12·L·C·T per token, as in the GPU machine's reference table but without the position-embedding lookup),
// median and spread of the step time, and peak memory. Timing is device-synchronised over windows of `--window` steps
// (one flush = one sync per window), so host-device overlap is kept inside a window.
//
//   ampcheck_bench_train --preset gpt2-124m --strategy bf16-autocast --batch 16 --seq 1024 --steps 30
//   ampcheck_bench_train --fp8-breakdown --batch 16 --seq 1024     (one FP8 Linear's time, part by part, vs bf16)
//   ampcheck_bench_train --preset gpt2-124m --strategy bf16-autocast --batch 16 --profile 5   (GPU time by category)
#include "engine/device.h"
#include "engine/engine_plan.h"
#include "engine/fp8.h"
#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <regex>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

using namespace ampcheck;

namespace {
// Where an FP8 Linear's time goes: one GPT-2 c_fc-shaped layer (M = batch x seq rows, K = 768, N = 3072), forward +
// backward, in bf16 (at::linear under autocast, the bf16 strategy's path) against the fp8 path's parts, each timed
// alone over `reps` device-synchronised repetitions: the amax reduction, the scale + saturating cast of x, w and the
// gradient, the FP8 transposes backward needs, and the three _scaled_mm products. Prints one JSON line.
nlohmann::json fp8_breakdown(const at::Device& device, int64_t M, int64_t K, int64_t N, int reps) {
  at::NoGradGuard no_grad;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor x = at::randn({M, K}, f32).to(at::kBFloat16), w = at::randn({N, K}, f32) * 0.02;
  at::Tensor g = (at::randn({M, N}, f32) * 1e-6).to(at::kBFloat16);
  engine::Fp8Config cfg;
  engine::Fp8Matmuls fp8(cfg, {"h.0.mlp.c_fc"}, device);
  fp8.begin_step(false);
  auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    engine::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    engine::synchronize(device);  // SYNC POINT: timing
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const at::Tensor wb = w.to(at::kBFloat16);
  nlohmann::json j = {{"impl", "fp8-breakdown"}, {"M", M}, {"K", K}, {"N", N}};
  // bf16: forward (weight cast + linear), dgrad, wgrad
  j["bf16_ms"] = {{"weight_cast", time_ms([&] { (void)w.to(at::kBFloat16); })},
                  {"forward_mm", time_ms([&] { (void)at::linear(x, wb); })},
                  {"dgrad_mm", time_ms([&] { (void)at::mm(g, wb); })},
                  {"wgrad_mm", time_ms([&] { (void)at::mm(g.t(), x); })}};
  const int xi = fp8.cast_index(0, engine::Fp8Matmuls::kInput), wi = fp8.cast_index(0, engine::Fp8Matmuls::kWeight),
            gi = fp8.cast_index(0, engine::Fp8Matmuls::kGrad);
  const auto qx = fp8.quantize(xi, x), qw = fp8.quantize(wi, w), qg = fp8.quantize(gi, g);
  j["fp8_ms"] = {{"amax_x", time_ms([&] { (void)at::linalg_vector_norm(x.to(at::kFloat), INFINITY); })},
                 {"quantize_x", time_ms([&] { (void)fp8.quantize(xi, x); })},
                 {"quantize_w", time_ms([&] { (void)fp8.quantize(wi, w); })},
                 {"quantize_grad", time_ms([&] { (void)fp8.quantize(gi, g); })},
                 {"transposes", time_ms([&] {
                    (void)qw.data.t().contiguous();
                    (void)qg.data.t().contiguous();
                    (void)qx.data.t().contiguous();
                  })}};
  // the products alone, on operands already laid out as _scaled_mm needs them (the transposes are timed above)
  const at::Tensor w_col = qw.data.t().contiguous().t(), g_t = qg.data.t().contiguous(),
                   x_col = qx.data.t().contiguous().t();
  j["fp8_ms"]["forward_mm"] = time_ms(
      [&] { (void)at::_scaled_mm(qx.data, qw.data.t(), qx.inv_scale, qw.inv_scale, {}, {}, at::kBFloat16, true); });
  j["fp8_ms"]["dgrad_mm"] =
      time_ms([&] { (void)at::_scaled_mm(qg.data, w_col, qg.inv_scale, qw.inv_scale, {}, {}, at::kBFloat16, false); });
  j["fp8_ms"]["wgrad_mm"] =
      time_ms([&] { (void)at::_scaled_mm(g_t, x_col, qg.inv_scale, qx.inv_scale, {}, {}, at::kBFloat16, false); });
  fp8.begin_step(true);
  j["fp8_ms"]["quantize_x_probed"] = time_ms([&] { (void)fp8.quantize(xi, x); });
  double bf16 = 0, f8 = 0;
  for (const auto& [k, v] : j["bf16_ms"].items()) bf16 += v.get<double>();
  for (const char* k :
       {"quantize_x", "quantize_w", "quantize_grad", "transposes", "forward_mm", "dgrad_mm", "wgrad_mm"})
    f8 += j["fp8_ms"][k].get<double>();
  j["bf16_total_ms"] = bf16;
  j["fp8_total_ms"] = f8;
  return j;
}
// Where one training step's GPU time goes: the Kineto profiler (LibTorch's, as torch.profiler) over `steps` steps,
// every CUDA kernel put in a category by bench/kernel_categories.json (first matching pattern, case-insensitive; the
// same table bench/profile_step.py uses for PyTorch-Python), per step: kernel ms per category, GPU busy time (union of
// the kernel intervals), the idle time inside the step (host gaps), wall time.
nlohmann::json profile_steps(engine::Trainer& trainer, const at::Device& device, int64_t steps,
                             const std::string& categories_path) {
  std::ifstream in(categories_path);
  if (!in) throw std::runtime_error(categories_path + ": cannot open (the kernel categories)");
  const nlohmann::json cats = nlohmann::json::parse(in)["categories"];
  std::vector<std::pair<std::string, std::regex>> rx;
  for (const auto& c : cats) {
    std::string alt;
    for (const auto& p : c[1]) alt += (alt.empty() ? "" : "|") + p.get<std::string>();
    rx.emplace_back(c[0].get<std::string>(), std::regex(alt, std::regex::icase));
  }
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  engine::synchronize(device);
  prof::enableProfiler(config, activities);
  const auto t0 = std::chrono::steady_clock::now();
  trainer.run_until(trainer.next_step() + steps);  // ends with a flush: SYNC POINT
  engine::synchronize(device);
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  const auto result = prof::disableProfiler();
  std::map<std::string, double> per;
  std::map<std::string, std::pair<double, int64_t>> by_kernel;  // name (first 120 characters) -> ms, launches
  std::vector<std::pair<uint64_t, uint64_t>> ivs;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const std::string name = e.name();
    std::string cat = "other";
    for (const auto& [c, r] : rx)
      if (std::regex_search(name, r)) {
        cat = c;
        break;
      }
    per[cat] += e.durationNs() / 1e6;
    auto& k = by_kernel["[" + cat + "] " + name.substr(0, 120)];
    k.first += e.durationNs() / 1e6;
    k.second += 1;
    ivs.emplace_back(e.startNs(), e.endNs());
  }
  std::sort(ivs.begin(), ivs.end());
  double busy = 0;
  for (size_t i = 0; i < ivs.size();) {
    uint64_t s = ivs[i].first, e = ivs[i].second;
    for (++i; i < ivs.size() && ivs[i].first <= e; ++i) e = std::max(e, ivs[i].second);
    busy += (e - s) / 1e6;
  }
  nlohmann::json km = nlohmann::json::object();
  for (const auto& [c, ms] : per) km[c] = ms / steps;
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [n, v] : by_kernel) order.emplace_back(v.first, n);
  std::sort(order.rbegin(), order.rend());
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < std::min<size_t>(40, order.size()); ++i)
    top.push_back({{"kernel", order[i].second},
                   {"ms", order[i].first / steps},
                   {"launches", static_cast<double>(by_kernel[order[i].second].second) / steps}});
  return {
      {"kernel_ms", km},         {"top_kernels", top}, {"kernels_per_step", static_cast<double>(ivs.size()) / steps},
      {"busy_ms", busy / steps}, {"wall_ms", wall},    {"idle_ms", std::max(0.0, wall - busy / steps)}};
}
}  // namespace

int main(int argc, char** argv) {
  std::string preset = "nano", strategy = "bf16-autocast", device_spec = "auto";
  int64_t batch = 8, seq = 0, steps = 20, warmup = 5, window = 10;
  int64_t probe_every = 1;
  double warmup_seconds = 0;  // after the warm-up steps, keep training until this much time has passed (steady clocks)
  bool fused = true, breakdown = false;
  int64_t profile = 0;
  std::string head_loss = "stock";
  bool cuda_graphs = false, fused_layernorm = false, fused_bias_gelu = false, gemm_epilogues = false;
  bool fused_grad_check = false, fused_param_norm = false, fast = false;
  std::string categories = std::string(AMPCHECK_SOURCE_DIR) + "/bench/kernel_categories.json";
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value for " << argv[i] << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    const std::string a = argv[i];
    if (a == "--preset") preset = next();
    else if (a == "--strategy")
      strategy = next();
    else if (a == "--device")
      device_spec = next();
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--seq")
      seq = std::stoll(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--warmup")
      warmup = std::stoll(next());
    else if (a == "--window")
      window = std::stoll(next());
    else if (a == "--warmup-seconds")
      warmup_seconds = std::stod(next());
    else if (a == "--probe-every")
      probe_every = std::stoll(next());
    else if (a == "--unfused")
      fused = false;
    else if (a == "--fp8-breakdown")
      breakdown = true;
    else if (a == "--profile")
      profile = std::stoll(next());
    else if (a == "--head-loss")
      head_loss = next();
    else if (a == "--cuda-graphs")
      cuda_graphs = true;
    else if (a == "--fused-layernorm")
      fused_layernorm = true;
    else if (a == "--fused-bias-gelu")
      fused_bias_gelu = true;
    else if (a == "--gemm-epilogues")
      gemm_epilogues = true;
    else if (a == "--fused-grad-check")
      fused_grad_check = true;
    else if (a == "--fused-param-norm")
      fused_param_norm = true;
    else if (a == "--fast")  // the fastest path: engine::request_fast_engine, as `ampcheck --engine fast`
      fast = true;
    else if (a == "--categories")
      categories = next();
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (breakdown) {
    const at::Device device = engine::resolve_device(device_spec);
    const int64_t rows = batch * (seq > 0 ? seq : 1024);
    std::cout << fp8_breakdown(device, rows, 768, 3072, device.is_cuda() ? 50 : 2).dump() << std::endl;
    return 0;
  }
  engine::RunConfig cfg;
  cfg.name = "bench";
  cfg.model.kind = "gpt";
  cfg.model.preset = preset;
  cfg.model.head_loss =
      models::parse_head_loss(head_loss);       // engine option: stock | chunked | fused (models/head_loss.h)
  cfg.model.fused_layernorm = fused_layernorm;  // engine option (kernels::add_layer_norm)
  cfg.model.fused_bias_gelu = fused_bias_gelu;  // engine option (kernels::linear_bias_gelu)
  cfg.model.gemm_epilogues = gemm_epilogues;    // engine option (kernels/gemm_epilogues.h)
  const auto mc = models::resolve_preset(cfg.model);
  cfg.data.batch_size = batch;
  cfg.data.seq_len = seq > 0 ? seq : mc.block_size;
  cfg.data.corpus_tokens = std::max<int64_t>(1 << 22, 4 * batch * cfg.data.seq_len);
  cfg.optimizer.lr = 6e-4;
  cfg.optimizer.fused = fused;
  cfg.schedule.warmup_steps = 10;
  cfg.loop.steps = warmup + steps;
  cfg.loop.log_every = window;
  cfg.loop.probe_every = probe_every;
  cfg.loop.cuda_graphs = cuda_graphs;            // engine option (engine/step_graph.h)
  cfg.loop.fused_grad_check = fused_grad_check;  // engine option (kernels::square_sum_nonfinite)
  cfg.loop.fused_param_norm = fused_param_norm;  // engine option (kernels::adamw_square_sums_)
  cfg.strategy = engine::strategy_preset(strategy);
  cfg.strategy.deterministic = false;  // throughput: let cuDNN / cuBLAS pick their fastest kernels
  if (fast) {                          // the one expansion of --engine fast; the flags below record what it requested
    engine::request_fast_engine(cfg);
    cuda_graphs = cfg.loop.cuda_graphs;
    fused_grad_check = cfg.loop.fused_grad_check;
    fused_param_norm = cfg.loop.fused_param_norm;
    fused_layernorm = cfg.model.fused_layernorm;
    fused_bias_gelu = cfg.model.fused_bias_gelu;
    gemm_epilogues = cfg.model.gemm_epilogues;
    head_loss = models::head_loss_name(cfg.model.head_loss);
  }
  const at::Device device = engine::resolve_device(device_spec);

  engine::Trainer trainer(cfg, device);
  trainer.run_until(warmup);  // warm-up: allocator, autocast cache, cuBLAS heuristics (excluded)
  // --warmup-seconds: on until the GPU has run this long under the step's load (its clocks and temperature settle; the
  // Python baselines take the same option), in windows of `window` steps
  for (const auto w0 = std::chrono::steady_clock::now();
       std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < warmup_seconds;)
    trainer.run_until(trainer.next_step() + window);  // ends with a flush: SYNC POINT
  // Peak memory of the timed steps; with CUDA graphs the peak of the whole run, capture included: a replay allocates
  // nothing, the memory its graph holds was allocated while capturing (in the warm-up).
  if (!cuda_graphs) engine::reset_peak_memory(device);
  if (profile > 0) {  // the per-category breakdown instead of the throughput windows
    nlohmann::json out = {{"impl", "ampcheck-cpp"},
                          {"preset", preset},
                          {"strategy", strategy},
                          {"batch", batch},
                          {"seq", cfg.data.seq_len},
                          {"steps", profile},
                          {"probe_every", probe_every},
                          {"head_loss", head_loss},
                          {"fused_layernorm", fused_layernorm},
                          {"fused_bias_gelu", fused_bias_gelu},
                          {"gemm_epilogues", gemm_epilogues},
                          {"fused_grad_check", fused_grad_check},
                          {"fused_param_norm", fused_param_norm},
                          {"cuda_graphs", trainer.cuda_graphs_status()},
                          {"engine", trainer.plan().describe()}};
    out.update(profile_steps(trainer, device, profile, categories));
    out["peak_memory_gib"] = engine::memory_stats(device).peak_allocated_bytes / double(1 << 30);
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::vector<double> window_ms;
  for (int64_t s = 0; s < steps; s += window) {
    const int64_t n = std::min(window, steps - s);
    engine::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    trainer.run_until(trainer.next_step() + n);  // ends with a flush: SYNC POINT
    const auto t1 = std::chrono::steady_clock::now();
    window_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / n);
  }
  const std::vector<double> windows_in_order = window_ms;
  std::sort(window_ms.begin(), window_ms.end());
  const double median_ms = window_ms[window_ms.size() / 2];
  const double tokens = static_cast<double>(batch * cfg.data.seq_len);
  const double n_params = static_cast<double>(trainer.model().parameter_count());
  const double flops_per_token = trainer.model().training_flops_per_token(cfg.data.seq_len);
  const auto mem = engine::memory_stats(device);
  const double last_loss = trainer.trajectory().rows.back()[trajectory::kLoss];
  nlohmann::json out = {
      {"impl", "ampcheck-cpp"},
      {"preset", preset},
      {"strategy", strategy},
      {"head_loss", head_loss},
      {"cuda_graphs", trainer.cuda_graphs_status()},
      {"engine", trainer.plan().describe()},  // the options as the engine plan applied them
      {"fused_layernorm", fused_layernorm},
      {"fused_bias_gelu", fused_bias_gelu},
      {"gemm_epilogues", gemm_epilogues},
      {"fused_grad_check", fused_grad_check},
      {"fused_param_norm", fused_param_norm},
      {"device", engine::device_info(device).name},
      {"batch", batch},
      {"seq", cfg.data.seq_len},
      {"params", n_params},
      {"probe_every", probe_every},
      {"warmup_steps", warmup},
      {"warmup_seconds", warmup_seconds},
      {"fused_adamw", fused},
      {"steps", steps},
      {"median_step_ms", median_ms},
      {"min_step_ms", window_ms.front()},
      {"max_step_ms", window_ms.back()},
      {"window", window},
      {"windows_ms", windows_in_order},
      {"ended_unix_s", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"tokens_per_s", tokens / (median_ms / 1000.0)},
      {"tflops", tokens / (median_ms / 1000.0) * flops_per_token / 1e12},
      {"peak_memory_gib", mem.peak_allocated_bytes / double(1 << 30)},
      {"peak_reserved_gib", mem.peak_reserved_bytes / double(1 << 30)},
      {"final_loss", last_loss},
      {"skipped_steps", trainer.trajectory().skipped_steps()}};
  std::cout << out.dump() << std::endl;
  return 0;
}
