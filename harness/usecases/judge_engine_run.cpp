// An engine run judged, into its row and its result file (judge_engine_run.h).
#include "usecases/judge_engine_run.h"
#include "usecases/scenario_files.h"

#include "io/files.h"
#include "validate/validate.h"

#include <string>
#include <vector>

namespace ampcheck::usecases {

namespace {

// The warnings of a completed run of ampcheck's own engine: every column not judged (the engine records every
// column), and the strategy's reduced precision not in effect. They need the engine's Strategy, which a judged
// external run does not have (judge_runs.cpp adds a recording's own), so harness/verdict stays a judge of data.
// `on_cuda`: TF32 exists there; on the CPU a tf32 run is FP32 and the warning says why.
void add_engine_run_warnings(verdict::Verdict& v, const trajectory::Trajectory& run, const engine::Strategy& strategy,
                             bool on_cuda, const trajectory::Trajectory& reference,
                             const std::vector<verdict::NoiseRun>& noise) {
  std::vector<std::string> columns;
  for (int c = 0; c < trajectory::kNumColumns; ++c) columns.push_back(trajectory::column_name(c));
  for (const auto& w : verdict::unjudged_columns(run, columns, false)) verdict::add_warning(v, w.signal, w.message);
  const bool only_tf32 = strategy.tf32 && strategy.param_dtype == at::kFloat && !strategy.autocast && !strategy.fp8 &&
                         !strategy.master_weights;
  const std::string m = verdict::precision_not_in_effect(
      strategy.reduces_precision(), run, reference, noise,
      only_tf32 && !on_cuda ? "TF32 applies to CUDA matmuls only: on the CPU a tf32 run is FP32" : "");
  if (!m.empty()) verdict::add_warning(v, "precision", m);
}

}  // namespace

Judged judge_engine_run(const run::ScenarioResult& r, const engine::Strategy& strategy, const at::Device& device,
                        const ReferenceToJudge& reference, const verdict::Expectation& expected,
                        const verdict::Tolerance& tolerance, bool strict) {
  const engine::RunOutcome& out = r.outcome;
  const bool completed = out.status == engine::RunOutcome::Status::Completed;
  return judge_run({out.status, out.error, r.trajectory,
                    first_nonfinite_note(std::to_string(out.first_nonfinite_step), out.first_nonfinite_module,
                                         out.first_nonfinite_pass)},
                   reference, expected, tolerance, strict, [&](verdict::Verdict& v) {
                     verdict::apply_rank_consistency(v, r.distributed.diverged_step, r.distributed.consistency);
                     if (completed)  // columns not judged, precision not in effect
                       add_engine_run_warnings(v, r.trajectory, strategy, device.is_cuda(), reference.trajectory,
                                               reference.noise);
                   });
}

std::string fp32_reference_class(const std::string& root, const std::string& device_class,
                                 const engine::RunConfig& run) {
  const std::string key = reference::reference_key(run).key;
  if (io::file_exists(reference::reference_path(root, device_class, key))) return device_class;
  std::vector<std::string> classes;
  for (const auto& c : io::subdirectories(root))
    if (c != "validate") classes.push_back(c);
  for (const auto& other : validate::nearest_classes(device_class, classes))
    if (io::file_exists(reference::reference_path(root, other, key))) return other;
  return "";
}

void record_judgement(const Judged& j, const reference::Reference& ref, report::ScenarioSummary& row,
                      trajectory::TrajectoryFile& tf, VerdictInFile verdict_in_file) {
  fill_result(row, j);
  if (verdict_in_file == VerdictInFile::Written) {
    tf.attributes.verdict = j.verdict.verdict;
    tf.attributes.verdict_message = j.verdict.message;
  }
  tf.attributes.reference = ref.path;
  add_verdict_series(tf, j.verdict, ref.file.trajectory, ref.loss_spread);
}

}  // namespace ampcheck::usecases
