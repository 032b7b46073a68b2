// train_scenario: the glue between a Scenario and the Trainer.
#include "run/scenario_run.h"

#include "inject/injection.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace ampcheck::run {

StepTiming step_timing(const trajectory::Trajectory& t, const std::string& method) {
  StepTiming st;
  st.method = method;
  const int64_t n = t.size();
  if (n == 0) return st;
  st.warmup_steps = std::min<int64_t>(n - 1, std::max<int64_t>(2, n / 10));
  std::vector<double> ms;
  for (int64_t i = st.warmup_steps; i < n; ++i)
    if (std::isfinite(t.rows[i][trajectory::kStepTimeMs])) ms.push_back(t.rows[i][trajectory::kStepTimeMs]);
  st.timed_steps = static_cast<int64_t>(ms.size());
  if (ms.empty()) return st;
  std::sort(ms.begin(), ms.end());
  auto quantile = [&](double q) {  // linear interpolation between order statistics (numpy's default)
    const double pos = q * static_cast<double>(ms.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, ms.size() - 1);
    return ms[lo] + (pos - static_cast<double>(lo)) * (ms[hi] - ms[lo]);
  };
  st.median_ms = quantile(0.5);
  st.p10_ms = quantile(0.1);
  st.p90_ms = quantile(0.9);
  return st;
}

std::string compute_dtype(const engine::Strategy& s) {
  const at::ScalarType t = s.autocast ? *s.autocast : s.param_dtype;
  if (t == at::kFloat && s.tf32) return "tf32";
  return engine::dtype_name(t);
}

ScenarioResult train_scenario(const scenario::Scenario& sc, const at::Device& device, int64_t steps_override,
                              engine::Trainer::ProgressFn progress, engine::GradientSync* sync) {
  ScenarioResult r;
  r.name = sc.run.name;
  engine::RunConfig cfg = sc.run;
  if (steps_override > 0) {
    cfg.loop.steps = steps_override;
    // the scenario's own steps were checked at parse time; a shorter run must not drop a planted event silently
    const auto& injections = inject::injections(cfg);
    for (size_t i = 0; i < injections.size(); ++i) {
      const auto& inj = injections[i];
      int64_t last = inj.from_step;
      for (int64_t st : inj.steps) last = std::max(last, st);
      if (last >= steps_override)
        throw std::invalid_argument(sc.path + ": inject[" + std::to_string(i) + "] fires at step " +
                                    std::to_string(last) + ", outside a run of --steps " +
                                    std::to_string(steps_override) + ". HINT: use at least " +
                                    std::to_string(last + 1) + " steps");
    }
  }
  r.device_class = engine::device_info(device).device_class;
  r.compute_dtype = compute_dtype(cfg.strategy);
  const std::string timing_method = engine::StepTimer(device).method();
  // measure this scenario alone: cached blocks of earlier scenarios in the process are returned first, so the
  // peak reserved is this scenario's (the CUDA caching allocator keeps freed blocks until empty_cache). cuBLAS
  // workspaces go too: one left in a large segment of an earlier scenario would keep the whole segment reserved.
  engine::synchronize(device);
  engine::release_library_workspaces(device);
  engine::release_cached_memory(device);
  engine::reset_peak_memory(device);
  try {
    engine::Trainer trainer(cfg, device, sync);
    if (progress) trainer.set_progress(progress);
    r.model_description = trainer.model().describe();
    const auto& d = trainer.config().data;
    r.samples_per_step = static_cast<double>(d.batch_size * cfg.loop.micro_batches);
    r.tokens_per_step = r.samples_per_step * static_cast<double>(d.seq_len);
    r.flops_per_step = r.tokens_per_step * trainer.model().training_flops_per_token(d.seq_len);
    r.workload = cfg.model.kind + " " + cfg.model.preset + ", batch " +
                 std::to_string(d.batch_size * cfg.loop.micro_batches) + " x " + std::to_string(d.seq_len);
    r.outcome = trainer.run();
    r.trajectory = trainer.trajectory();
    const engine::EnginePlan plan = trainer.plan();  // the engine options as they ran (applied, or refused and why)
    r.engine = plan.describe();
    r.engine_plan = plan.decisions;
    engine::synchronize(device);
    const engine::MemoryStats mem = engine::memory_stats(device);
    r.peak_memory_bytes = mem.peak_allocated_bytes;
    r.peak_reserved_bytes = mem.peak_reserved_bytes;
  } catch (const std::exception& e) {  // construction refused (unsupported here, bad data)
    r.outcome.status = engine::RunOutcome::Status::Error;
    r.outcome.error = e.what();
  }
  const auto& rows = r.trajectory.rows;
  if (!rows.empty()) {
    r.first_loss = rows.front()[trajectory::kLoss];
    r.final_loss = rows.back()[trajectory::kLoss];
    r.min_loss = rows.front()[trajectory::kLoss];
    for (const auto& row : rows) r.min_loss = std::min(r.min_loss, row[trajectory::kLoss]);
    r.timing = step_timing(r.trajectory, timing_method);
  }
  return r;
}

ScenarioResult train_scenario(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps_override,
                              engine::Trainer::ProgressFn progress, engine::GradientSync* sync) {
  return train_scenario(sc, engine::resolve_device(device_spec.empty() ? sc.device : device_spec), steps_override,
                        std::move(progress), sync);
}

}  // namespace ampcheck::run
