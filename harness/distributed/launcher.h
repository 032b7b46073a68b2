// Running a data-parallel scenario (`distributed:`): ampcheck starts the ranks itself — one process per rank, the
// same binary's hidden `_rank` command, with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT set and the
// TCPStore hosted by the launching process, OMP_NUM_THREADS = cores / ranks unless set — or, started by torchrun / srun
// (those variables already set), the process is itself one rank. Every rank writes its trajectory to
// <out>/<name>.ranks/rank<k>.h5 (with its log, rank<k>.log, when ampcheck started it); the result is rank 0's
// trajectory (the loss averaged over the ranks) with the ranks' step times, collective shares and cross-rank
// consistency.
//
// A rank that exits with an error or a signal ends the run at once: the others get SIGTERM, then SIGKILL after 2 s,
// and the error names the rank and the tail of its log. A rank that hangs makes its peers' collectives time out after
// `distributed.timeout_s` (the process group's timeout); they end with that error, and a rank still running
// min(15 s, timeout_s) after another finished is stopped the same way and named. Ranks die with the launcher
// (PR_SET_PDEATHSIG).
#pragma once

#include "run/scenario_run.h"
#include "scenario/scenario.h"

#include <string>

namespace ampcheck::distributed {

// A scenario with `distributed:`: launched here or joined through the environment. out_dir: where the per-rank
// files go (created). writes_results is false on a joined rank other than 0 (it must not write the run directory).
run::ScenarioResult run_distributed(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps,
                                    const std::string& out_dir, bool* writes_results = nullptr);

// The `_rank` command: one rank of a launched run. Writes out_file; returns the process exit code (0 when the rank
// ran, whatever the run's outcome; 3 when it could not run, the reason on stderr).
int rank_main(const std::string& scenario_path, const std::string& device_spec, int64_t steps,
              const std::string& out_file);

}  // namespace ampcheck::distributed
