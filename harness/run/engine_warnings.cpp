// The engine run's warnings (engine_warnings.h): verdict's unjudged_columns and precision_not_in_effect, given what
// the engine's strategy claims.
#include "run/engine_warnings.h"

#include <string>

namespace ampcheck::run {

void add_engine_run_warnings(verdict::Verdict& v, const trajectory::Trajectory& run, const engine::Strategy& strategy,
                             bool on_cuda, const trajectory::Trajectory& reference,
                             const std::vector<verdict::NoiseRun>& noise) {
  std::vector<std::string> columns;  // the engine records every column
  for (int c = 0; c < trajectory::kNumColumns; ++c) columns.push_back(trajectory::column_name(c));
  for (const auto& w : verdict::unjudged_columns(run, columns, false)) verdict::add_warning(v, w.signal, w.message);
  const bool only_tf32 = strategy.tf32 && strategy.param_dtype == at::kFloat && !strategy.autocast && !strategy.fp8 &&
                         !strategy.master_weights;
  const std::string m = verdict::precision_not_in_effect(
      strategy.reduces_precision(), run, reference, noise,
      only_tf32 && !on_cuda ? "TF32 applies to CUDA matmuls only: on the CPU a tf32 run is FP32" : "");
  if (!m.empty()) verdict::add_warning(v, "precision", m);
}

}  // namespace ampcheck::run
