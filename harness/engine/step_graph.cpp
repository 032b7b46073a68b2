// StepGraphs (step_graph.h). The capture goes through ATen's CUDAGraph, so this file needs the CUDA headers; a build
// without them (no CUDA LibTorch / toolkit) has StepGraphs that refuse every run in why_not.
#include "engine/step_graph.h"

#if __has_include(<cuda_runtime_api.h>) && __has_include(<ATen/cuda/CUDAGraph.h>)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define AMPCHECK_HAVE_CUDA_GRAPHS 1
#endif

#include <map>
#include <stdexcept>

namespace ampcheck::engine {

std::string StepGraphs::why_not(const RunConfig& cfg, const at::Device& device, bool has_sync) {
#ifndef AMPCHECK_HAVE_CUDA_GRAPHS
  return "this build has no CUDA graphs (built without the CUDA headers)";
#else
  if (!device.is_cuda()) return "CUDA graphs need a CUDA device (the run is on " + device.str() + ")";
  if (has_sync) return "data-parallel collectives run between the step's phases (not captured)";
  if (cfg.strategy.fp8)
    return "FP8 casts keep host-side state per step (the amax history slot, the probe rows): not captured yet";
  if (cfg.faults) return "planted events decide on the host, per step, what to change";
  if (cfg.loop.resume_at > 0) return "a restart mid-run rebuilds the parameters the graph would hold";
  if (!cfg.loop.zero_grad) return "the zero_grad pitfall accumulates into grads a captured backward would overwrite";
  if (cfg.optimizer.kind != "adamw")
    return "optimizer " + cfg.optimizer.kind + " takes its learning rate as a host number";
  if (cfg.strategy.scaler.kind != ScalerKind::None && !cfg.optimizer.fused)
    return "GradScaler with a non-fused optimizer decides on the host whether to step (PyTorch's default path)";
  if (!cfg.loop.step_through_scaler) return "the step_through_scaler pitfall raises on the host at update()";
  return "";
#endif
}

#ifdef AMPCHECK_HAVE_CUDA_GRAPHS
struct StepGraphs::Impl {
  struct Entry {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
  };
  std::map<int, Entry> entries;
  at::cuda::MempoolId_t pool{0, 0};
  bool have_pool = false;
};
#else
struct StepGraphs::Impl {};
#endif

StepGraphs::StepGraphs(int64_t warmup_steps) : impl_(std::make_unique<Impl>()), warmup_steps_(warmup_steps) {}
StepGraphs::~StepGraphs() = default;

int64_t StepGraphs::graphs() const {
#ifdef AMPCHECK_HAVE_CUDA_GRAPHS
  int64_t n = 0;
  for (const auto& [k, e] : impl_->entries) n += e.graph ? 1 : 0;
  return n;
#else
  return 0;
#endif
}

bool StepGraphs::run(int key, const std::function<void()>& body) {
#ifndef AMPCHECK_HAVE_CUDA_GRAPHS
  body();
  return false;
#else
  auto& e = impl_->entries[key];
  if (!e.graph && eager_runs_ < warmup_steps_) {
    ++eager_runs_;
    body();
    return false;
  }
  if (!e.graph) {
    // capture on a side stream (PyTorch's recipe: the capturing stream must not be the legacy default stream), every
    // kind of step in one memory pool: each replay writes what it later reads, so the graphs may share memory.
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    side.synchronize();
    current.synchronize();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      graph->capture_begin(impl_->have_pool ? impl_->pool : at::cuda::MempoolId_t{0, 0});
      try {
        body();
      } catch (...) {
        try {
          graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph->capture_end();
    }
    side.synchronize();
    if (!impl_->have_pool) {
      impl_->pool = graph->pool();
      impl_->have_pool = true;
    }
    e.graph = std::move(graph);
  }
  e.graph->replay();
  ++replays_;
  return true;
#endif
}

}  // namespace ampcheck::engine
