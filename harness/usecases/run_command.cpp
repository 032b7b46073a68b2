// run: the scenarios trained and their trajectories written, without a reference — each run's status against its
// expectation only (verdict::decide on the status, with the expectation the plan decided).
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "run/progress.h"
#include "run/provenance.h"
#include "verdict/pass_rule.h"

#include <ostream>

namespace ampcheck::usecases {

RunResult run_command(const RunOptions& requested, std::ostream& log) {
  RunResult result;
  const auto [plan, out, opts] = stage_scenarios(requested);
  result.skipped = plan.skipped;
  if (!result.skipped.empty()) return result;
  bool follower = false;
  const size_t n = plan.scenarios.size();
  for (size_t i = 0; i < n; ++i) {
    const PlannedScenario& planned = plan.scenarios[i];
    const scenario::Scenario& sc = planned.scenario;
    log_scenario_start(log, i, n, sc);
    const at::Device device = run_device(sc, opts);  // resolved once: the run and its result file
    bool writes = true;
    auto r = train_single_or_data_parallel(sc, device, opts, &writes,
                                           run::terminal_progress(opts.steps > 0 ? opts.steps : sc.run.loop.steps));
    if (!writes) {  // a joined rank other than 0: rank 0 writes the run directory
      follower = true;
      continue;
    }
    if (r.distributed.world_size > 0)
      log << "  " << r.distributed.world_size << " ranks (" << r.distributed.backend
          << "): " << (r.distributed.consistency.empty() ? "ranks agreed at every check" : r.distributed.consistency)
          << "\n";
    if (!r.trajectory.rows.empty() || r.outcome.status == engine::RunOutcome::Status::Error)
      write_result(opts, sc.run.name + ".h5", run::result_file(sc, device, r));
    // the expectation as the plan decided it, against the run's status alone (verdict/pass_rule.h)
    const verdict::Decision d = verdict::decide(
        planned.expected, verdict::observe_status(engine::status_name(r.outcome.status), r.outcome.error), false);
    result.results.push_back({std::move(r), d.pass, d.message});
  }
  if (follower && result.results.empty()) {
    result.written = false;
    return result;
  }
  out->publish();
  return result;
}

}  // namespace ampcheck::usecases
