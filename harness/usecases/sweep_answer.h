// The sweep's answer (internal to usecases: sweep.cpp and sweep_answer.cpp): the timing of every run against FP32's
// three runs and the interleaved re-runs that rank the strategies that track, the recommendation, and the reports —
// summary.json / summary.md / report.html through the run directory, the sweep's own page, sweep.json.
#pragma once

#include "usecases/options.h"
#include "usecases/sweep_runs.h"
#include "usecases/sweep_types.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ampcheck::usecases::sweep_answer {

double median(std::vector<double> v);         // of the finite, positive values; NaN if none
double spread(const std::vector<double>& v);  // the largest over the smallest (NaN with fewer than two measured)
// Every measured row's first ranking against FP32 (the FP32 runs' spread as its noise); the rows that can be
// recommended then ranked by interleaved re-runs of `run_steps` steps at most.
void rank_speeds(SweepResult& r, const SweepPaths& paths, const SweepOptions& o, int64_t run_steps, std::ostream& log);
std::string recommend(const SweepResult& r);                           // the RECOMMENDATION line's text
void write_sweep_reports(SweepResult& r, const std::string& command);  // the run directory's reports and sweep.json

}  // namespace ampcheck::usecases::sweep_answer
