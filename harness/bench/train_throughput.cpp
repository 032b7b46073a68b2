// Training-step throughput of the ampcheck engine: a GPT preset trained with a strategy for warm-up + measured
// steps; prints one JSON line with tokens/s, TFLOP/s (Model::training_flops_per_token: 6 per matmul weight +
// attention 12·L·C·T per token, as in ../shared/GPU.md but without the position-embedding lookup), median and spread of the step time, and peak memory. Timing is device-synchronised over
// windows of `--window` steps (one flush = one sync per window), so host-device overlap is kept inside a window.
//
//   ampcheck_bench_train --preset gpt2-124m --strategy bf16-autocast --batch 16 --seq 1024 --steps 30
#include "engine/device.h"
#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

using namespace ampcheck;

int main(int argc, char** argv) {
  std::string preset = "nano", strategy = "bf16-autocast", device_spec = "auto";
  int64_t batch = 8, seq = 0, steps = 20, warmup = 5, window = 10;
  int64_t probe_every = 1;
  bool fused = true;
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
    else if (a == "--strategy") strategy = next();
    else if (a == "--device") device_spec = next();
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--seq") seq = std::stoll(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--warmup") warmup = std::stoll(next());
    else if (a == "--window") window = std::stoll(next());
    else if (a == "--probe-every") probe_every = std::stoll(next());
    else if (a == "--unfused") fused = false;
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  engine::RunConfig cfg;
  cfg.name = "bench";
  cfg.model.kind = "gpt";
  cfg.model.preset = preset;
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
  cfg.strategy = engine::strategy_preset(strategy);
  cfg.strategy.deterministic = false;  // throughput: let cuDNN / cuBLAS pick their fastest kernels
  const at::Device device = engine::resolve_device(device_spec);

  engine::Trainer trainer(cfg, device);
  trainer.run_until(warmup);  // warm-up: allocator, autocast cache, cuBLAS heuristics (excluded)
  engine::reset_peak_memory(device);
  std::vector<double> window_ms;
  for (int64_t s = 0; s < steps; s += window) {
    const int64_t n = std::min(window, steps - s);
    engine::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    trainer.run_until(trainer.next_step() + n);  // ends with a flush: SYNC POINT
    const auto t1 = std::chrono::steady_clock::now();
    window_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / n);
  }
  std::sort(window_ms.begin(), window_ms.end());
  const double median_ms = window_ms[window_ms.size() / 2];
  const double tokens = static_cast<double>(batch * cfg.data.seq_len);
  const double n_params = static_cast<double>(trainer.model().parameter_count());
  const double flops_per_token = trainer.model().training_flops_per_token(cfg.data.seq_len);
  const auto mem = engine::memory_stats(device);
  const double last_loss = trainer.trajectory().rows.back()[engine::kLoss];
  nlohmann::json out = {{"impl", "ampcheck-cpp"},
                        {"preset", preset},
                        {"strategy", strategy},
                        {"device", engine::device_info(device).name},
                        {"batch", batch},
                        {"seq", cfg.data.seq_len},
                        {"params", n_params},
                        {"probe_every", probe_every},
                        {"fused_adamw", fused},
                        {"steps", steps},
                        {"median_step_ms", median_ms},
                        {"min_step_ms", window_ms.front()},
                        {"max_step_ms", window_ms.back()},
                        {"tokens_per_s", tokens / (median_ms / 1000.0)},
                        {"tflops", tokens / (median_ms / 1000.0) * flops_per_token / 1e12},
                        {"peak_memory_gib", mem.peak_allocated_bytes / double(1 << 30)},
                        {"final_loss", last_loss},
                        {"skipped_steps", trainer.trajectory().skipped_steps()}};
  std::cout << out.dump() << std::endl;
  return 0;
}
