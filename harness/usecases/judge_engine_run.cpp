// An engine run judged, into its row and its result file (judge_engine_run.h).
#include "usecases/judge_engine_run.h"
#include "usecases/scenario_files.h"

#include "io/files.h"
#include "run/engine_warnings.h"
#include "validate/validate.h"

#include <string>

namespace ampcheck::usecases {

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
                       run::add_engine_run_warnings(v, r.trajectory, strategy, device.is_cuda(), reference.trajectory,
                                                    reference.noise);
                   });
}

std::string fp32_reference_class(const std::string& root, const std::string& device_class,
                                 const engine::RunConfig& run) {
  const std::string key = reference::reference_key(run).key;
  if (file_exists(reference::reference_path(root, device_class, key))) return device_class;
  std::vector<std::string> classes;
  for (const auto& c : io::subdirectories(root))
    if (c != "validate") classes.push_back(c);
  for (const auto& other : validate::nearest_classes(device_class, classes))
    if (file_exists(reference::reference_path(root, other, key))) return other;
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
