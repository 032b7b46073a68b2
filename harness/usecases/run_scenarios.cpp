// run: the scenarios trained and their trajectories written, without a reference — each run's status against its
// expectation only (verdict::decide on the status; run/scenario_run.h).
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "run/progress.h"

#include <ostream>

namespace ampcheck::usecases {

RunResult run_scenarios(const RunOptions& requested, std::ostream& log) {
  RunResult result;
  const auto files = resolve_scenario_files(requested);
  result.skipped = why_skipped(files, requested);
  if (!result.skipped.empty()) return result;
  refuse_existing_run_outputs(files, requested);  // before any training: nothing run, nothing written
  RunDirectory out(requested);                    // written whole: the run directory appears complete or not at all
  const RunOptions opts = out.staged(requested);
  bool follower = false;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto sc = load_for_run(files[i], opts);
    log << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ")\n"
        << std::flush;
    bool writes = true;
    auto r =
        run_any_scenario(sc, opts, &writes, run::terminal_progress(opts.steps > 0 ? opts.steps : sc.run.loop.steps));
    if (!writes) {  // a joined rank other than 0: rank 0 writes the run directory
      follower = true;
      continue;
    }
    if (r.distributed.world_size > 0)
      log << "  " << r.distributed.world_size << " ranks (" << r.distributed.backend
          << "): " << (r.distributed.consistency.empty() ? "ranks agreed at every check" : r.distributed.consistency)
          << "\n";
    if (!r.trajectory.rows.empty() || r.outcome.status == engine::RunOutcome::Status::Error)
      write_result(opts, sc.run.name + ".h5", result_file(sc, run_device(sc, opts), r));
    result.results.push_back(std::move(r));
  }
  if (follower && result.results.empty()) {
    result.written = false;
    return result;
  }
  out.publish();
  return result;
}

}  // namespace ampcheck::usecases
