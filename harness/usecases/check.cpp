// check: every scenario run and judged against its FP32 reference — in this process, one scenario after another, or
// `--jobs` scenarios at once in processes of their own (check_pool.h) — and the run directory written whole.
#include "usecases/judge_engine_run.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/check_pool.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "distributed/process_group.h"
#include "engine/device.h"
#include "reference/reference_store.h"
#include "run/progress.h"
#include "run/provenance.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <ostream>

namespace ampcheck::usecases {

namespace {

// One scenario in this process: its reference, the run, the verdict (judge_run) and the result file. What stops it
// (no reference, a result file that may not be replaced) is the row's FAIL message. nullopt on a joined rank other
// than 0: rank 0 judges and writes.
std::optional<report::ScenarioSummary> check_scenario(const PlannedScenario& planned, const at::Device& device,
                                                      const RunOptions& opts, MatmulPeaks& peaks) {
  const scenario::Scenario& sc = planned.scenario;
  report::ScenarioSummary row = scenario_row(sc, device);
  engine::RunConfig run = sc.run;
  if (opts.steps > 0) run.loop.steps = opts.steps;
  try {
    // load the reference first: a missing one is reported before minutes of training
    const auto ref = reference::load_reference(reference_root(opts), row.device_class, run, opts.suite);
    bool writes = true;
    const auto r = train_single_or_data_parallel(sc, device, opts, &writes, run::terminal_progress(run.loop.steps));
    if (!writes) return std::nullopt;
    const Judged j = judge_engine_run(r, run.strategy, device, {ref.file.trajectory, ref.noise}, planned.expected,
                                      sc.tolerance, opts.strict);
    trajectory::TrajectoryFile tf = run::result_file(sc, device, r);
    record_judgement(j, ref, row, tf, VerdictInFile::Written);
    fill_distributed(row, r);
    fill_measurements(row, r, peaks.tflops_for(r, device));
    row.trajectory_file = sc.run.name + ".h5";
    write_result(opts, row.trajectory_file, tf);
  } catch (const std::exception& e) {
    row.pass = false;
    row.message = e.what();
  }
  return row;
}

// The scenarios one after another in this process, each on its device. *follower: this is a joined rank other
// than 0.
report::RunSummary check_here(const ScenarioPlan& plan, const RunOptions& opts, std::ostream& log, bool* follower) {
  report::RunSummary summary;
  MatmulPeaks peaks;  // measured once per compute dtype, for every row's MFU
  const size_t n = plan.scenarios.size();
  for (size_t i = 0; i < n; ++i) {
    const scenario::Scenario& sc = plan.scenarios[i].scenario;
    log_scenario_start(log, i, n, sc);
    const at::Device device = run_device(sc, opts);
    if (summary.device_class.empty()) set_provenance(summary, device);
    const auto row = check_scenario(plan.scenarios[i], device, opts, peaks);
    if (!row) {
      *follower = true;
      continue;
    }
    if (!row->pass) log << "  FAIL " << row->name << ": " << row->message << "\n";
    summary.scenarios.push_back(*row);
  }
  return summary;
}

// A joined rank other than 0 of a torchrun / srun job (RANK set, not 0): rank 0 judges and writes the reports.
bool joined_rank_other_than_zero() {
  const char* rank = std::getenv("RANK");
  return distributed::in_distributed_environment() && rank && std::string(rank) != "0";
}

// How many scenarios run at once: a rank of a torchrun / srun job runs its scenarios in this process, in the job's
// order; else --jobs (default_jobs), never more than there are scenarios.
int64_t scenarios_at_once(const RunOptions& opts, size_t scenarios) {
  if (distributed::in_distributed_environment()) return 1;
  return std::min<int64_t>(opts.jobs > 0 ? opts.jobs : default_jobs(opts.device), static_cast<int64_t>(scenarios));
}

}  // namespace

// The phases: the plan (every file read once), the run directory, the scenarios run and judged (here, or in processes
// of their own), the reports published.
SuiteResult check(const RunOptions& requested, std::ostream& log) {
  SuiteResult result;
  const StagedScenarios staged = stage_scenarios(requested);
  const ScenarioPlan& plan = staged.plan;
  const RunOptions& opts = staged.opts;
  result.skipped = plan.skipped;
  if (!result.skipped.empty()) return result;
  bool follower = joined_rank_other_than_zero();
  const int64_t jobs = scenarios_at_once(opts, plan.scenarios.size());
  result.summary = jobs > 1 ? check_in_processes(plan, opts, jobs, log) : check_here(plan, opts, log, &follower);
  result.summary.suite = opts.suite;
  result.summary.strict = opts.strict;
  result.written = !follower;
  if (follower) return result;
  for (auto& row : result.summary.scenarios)
    row.distributed.rank_files = staged.out->published_path(row.distributed.rank_files);
  publish_reports(*staged.out, result);
  return result;
}

SuiteResult check_default(RunOptions opts, std::ostream& log) {
  const at::Device dev = engine::resolve_device("auto");
  opts.suite = dev.is_cuda() ? "gpu" : "ci";
  opts.device = dev.is_cuda() ? "cuda" : "cpu";
  log << "ampcheck: suite '" << opts.suite << "' on " << engine::device_info(dev).name << "\n";
  return check(opts, log);
}

}  // namespace ampcheck::usecases
