// Where scenarios, suites and references are, which scenario files a command names, and how one is run as the options
// say: the pieces every use case that trains scenarios shares.
#pragma once

#include "usecases/options.h"
#include "usecases/run_directory.h"

#include "engine/trainer.h"
#include "report/summary.h"
#include "run/scenario_run.h"
#include "scenario/scenario.h"

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace ampcheck::usecases {

std::string scenarios_dir();   // $AMPCHECK_SCENARIOS, else <source>/scenarios
std::string references_dir();  // $AMPCHECK_REFERENCES, else <source>/references
// --references, else references_dir()
std::string reference_root(const RunOptions& opts);

// The scenario files named (files, then --suite's); throws if none.
std::vector<std::string> resolve_scenario_files(const RunOptions& opts);
// Why run and check skip these scenarios here ("" if they do not): --device cuda without a CUDA device, or every
// scenario named data-parallel on CUDA with more ranks than this machine has GPUs. The command prints
// "SKIPPED: <why>" and exits 77 (CTest's skip code).
std::string why_skipped(const std::vector<std::string>& files, const RunOptions& opts);

// A scenario as `opts` runs it: the file, with --engine fast's options applied.
scenario::Scenario load_for_run(const std::string& file, const RunOptions& opts);

// One scenario of a command, read once: the file named, the scenario it gives and what its verdict must be.
struct PlannedScenario {
  std::string file;               // as named, or as --suite lists it
  scenario::Scenario scenario;    // parsed, with --engine fast's options applied (load_for_run)
  verdict::Expectation expected;  // its expect: as the pass rule takes it (scenario::expectation)
};

// What check and run will do, decided before anything trains or is written: every file named, resolved and parsed
// once, in the order named — or why none runs here. The phases after it take the loaded scenarios, not the files.
struct ScenarioPlan {
  std::vector<PlannedScenario> scenarios;  // empty when skipped
  std::string skipped;                     // "" when they run; else why_skipped's reason (exit 77)
};
// resolve_scenario_files, each file parsed, why_skipped on the scenarios parsed, --engine applied, and two files that
// give one `name:` refused (refuse_duplicate_scenario_names). Throws naming the file and the field, or both files.
ScenarioPlan plan_scenarios(const RunOptions& opts);
// check's and run's start: the plan and, where its scenarios run here, the run directory they are written into.
struct StagedScenarios {
  ScenarioPlan plan;                  // plan.skipped non-empty: none runs here; nothing checked, nothing written
  std::unique_ptr<RunDirectory> out;  // written whole (null when skipped)
  RunOptions opts;                    // the requested options writing into out's staging directory
};
// plan_scenarios; unless skipped, then, before any training, check_run_directory_replaceable and the RunDirectory.
StagedScenarios stage_scenarios(const RunOptions& requested);
// The progress line before scenario i (0-based) of n: "[i+1/n] name (strategy)\n", or "(strategy, detail)", flushed.
void log_scenario_start(std::ostream& log, size_t i, size_t n, const scenario::Scenario& sc,
                        const std::string& detail = "");
// One file read as the plan reads it (load_for_run and its expectation), without the plan's checks across files.
PlannedScenario plan_scenario(const std::string& file, const RunOptions& opts);
// Throws naming both files where two give one `name:` (their results, goldens and reports would share one <name>.h5).
void refuse_duplicate_scenario_names(const std::vector<PlannedScenario>& scenarios);
// The device it runs on: --device, else the scenario's own.
at::Device run_device(const scenario::Scenario& sc, const RunOptions& opts);

// Trains one scenario as it asks: in this process on `device` (run::train_scenario; run_device's device, resolved
// once by the caller), or (distributed:) data parallel over its ranks, each on its own (distributed/launcher.h).
// writes_results is false on a joined rank other than 0, which must not write the run directory.
run::ScenarioResult train_single_or_data_parallel(const scenario::Scenario& sc, const at::Device& device,
                                                  const RunOptions& opts, bool* writes_results,
                                                  engine::Trainer::ProgressFn progress);

}  // namespace ampcheck::usecases
