// check's process pool (`ampcheck check --jobs N`): independent scenarios, each in an `ampcheck check` process of its
// own, at most N at once (check_pool.cpp says how).
#pragma once

#include "usecases/options.h"
#include "usecases/scenario_files.h"

#include "report/summary.h"

#include <cstdint>
#include <iosfwd>
#include <string>

namespace ampcheck::usecases {

// Each scenario in its own `ampcheck check` process, at most `jobs` at once, each with cores / jobs intra-op threads;
// their summaries merged in the files' order, their trajectories moved into opts.out_dir. The summary: the provenance
// of the first scenario that ran, one row per scenario.
report::RunSummary check_in_processes(const ScenarioPlan& plan, const RunOptions& opts, int64_t jobs,
                                      std::ostream& log);
// --jobs' default: 1 on a GPU (scenarios would contend for it), else one per core.
int64_t default_jobs(const std::string& device);

}  // namespace ampcheck::usecases
