// check: every scenario run and judged against its FP32 reference — in this process, one scenario after another, or
// `--jobs` scenarios at once in processes of their own (parallel_check.cpp) — and the run directory written whole.
#include "usecases/judge_engine_run.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "distributed/process_group.h"
#include "engine/device.h"
#include "reference/reference_store.h"
#include "run/progress.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>

namespace ampcheck::usecases {

namespace {

// One scenario in this process: its reference, the run, the verdict (judge_run) and the result file. What stops it
// (no reference, a result file that may not be replaced) is the row's FAIL message. nullopt on a joined rank other
// than 0: rank 0 judges and writes.
std::optional<report::ScenarioSummary> check_scenario(const scenario::Scenario& sc, const at::Device& device,
                                                      const RunOptions& opts,
                                                      std::map<std::string, double>& peak_tflops) {
  report::ScenarioSummary row = scenario_row(sc, device);
  engine::RunConfig run = sc.run;
  if (opts.steps > 0) run.loop.steps = opts.steps;
  try {
    // load the reference first: a missing one is reported before minutes of training
    const auto ref = reference::load_reference(reference_root(opts), row.device_class, run, opts.suite);
    bool writes = true;
    const auto r = run_any_scenario(sc, opts, &writes, run::terminal_progress(run.loop.steps));
    if (!writes) return std::nullopt;
    const Judged j = judge_engine_run(r, run.strategy, device, {ref.file.trajectory, ref.noise},
                                      scenario::expectation(sc.expect), sc.tolerance, opts.strict);
    trajectory::TrajectoryFile tf = result_file(sc, device, r);
    record_judgement(j, ref, row, tf, VerdictInFile::Written);
    fill_distributed(row, r);
    fill_measurements(row, r, device, peak_tflops);
    row.trajectory_file = sc.run.name + ".h5";
    write_result(opts, row.trajectory_file, tf);
  } catch (const std::exception& e) {
    row.pass = false;
    row.message = e.what();
  }
  return row;
}

// The scenarios one after another in this process. *follower: this is a joined rank other than 0.
report::RunSummary check_here(const std::vector<std::string>& files, const RunOptions& opts, std::ostream& log,
                              bool* follower) {
  report::RunSummary summary;
  std::map<std::string, double> peak_tflops;  // device class / compute dtype -> measured matmul rate
  for (size_t i = 0; i < files.size(); ++i) {
    const auto sc = load_for_run(files[i], opts);
    log << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ")\n"
        << std::flush;
    const at::Device device = run_device(sc, opts);
    if (summary.device_class.empty()) set_provenance(summary, sc, device);
    const auto row = check_scenario(sc, device, opts, peak_tflops);
    if (!row) {
      *follower = true;
      continue;
    }
    if (!row->pass) log << "  FAIL " << row->name << ": " << row->message << "\n";
    summary.scenarios.push_back(*row);
  }
  return summary;
}

}  // namespace

SuiteResult check(const RunOptions& requested, std::ostream& log) {
  SuiteResult result;
  const auto files = resolve_scenario_files(requested);
  result.skipped = why_skipped(files, requested);
  if (!result.skipped.empty()) return result;
  refuse_existing_run_outputs(files, requested);  // before any training: nothing run, nothing written
  RunDirectory out(requested);                    // written whole: the run directory appears complete or not at all
  const RunOptions opts = out.staged(requested);
  // a rank of a torchrun / srun job runs its scenarios in this process, in the job's order; a joined rank other than
  // 0 (RANK set by torchrun / srun) writes nothing: rank 0 judges and writes the reports
  const bool joined = distributed::in_distributed_environment();
  const char* rank = std::getenv("RANK");
  bool follower = joined && rank && std::string(rank) != "0";
  const int64_t jobs = joined ? 1
                              : std::min<int64_t>(opts.jobs > 0 ? opts.jobs : default_jobs(opts.device),
                                                  static_cast<int64_t>(files.size()));
  if (jobs > 1) {
    log << files.size() << " scenarios, " << jobs << " at a time\n" << std::flush;
    auto par = check_in_processes(files, opts, jobs, log);
    result.summary = std::move(par.header);
    result.summary.scenarios = std::move(par.rows);
  } else {
    result.summary = check_here(files, opts, log, &follower);
  }
  result.summary.suite = opts.suite;
  result.summary.strict = opts.strict;
  result.written = !follower;
  if (follower) return result;
  for (auto& row : result.summary.scenarios)
    row.distributed.rank_files = out.published_path(row.distributed.rank_files);
  publish_reports(out, result);
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
