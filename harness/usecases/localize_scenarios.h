// localize: for an engine scenario whose strategy fails against its FP32 reference, which modules' precision makes it
// fail. The scenario is run once as written and judged against its reference expecting `tracks` (judge_run); where it
// fails (not as an error), the bisection of `sweep --localize` (localize.h) searches the model's module tree, each
// probe the same scenario with model.keep_fp32 = the chosen modules (a probe as long as localize.h's probe_length,
// the schedule unchanged: engine::LoopConfig::stop_after), judged by the same judge_run against the same reference cut
// to the probe's length. The answer per scenario: the set that makes the run track, the probe runs it took against
// the bound 2·log2(modules) + 2, what keeping the set costs (ms/step and peak memory of the probe with exactly that
// set against the failing run's), or that no small set exists and the fix where it is known (fp32 master weights).
// The run directory (--out: summary.json, junit.xml, summary.md, report.html, localize.json, the failing runs'
// trajectories) is written whole, under the overwrite rule of check (run_directory.h).
#pragma once

#include "usecases/localize.h"
#include "usecases/options.h"

#include "report/summary.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace ampcheck::usecases {

struct ScenarioLocalization {
  std::string scenario, strategy;
  // the scenario's run as written, judged expecting tracks; its message ends with the localization in words; pass:
  // it tracks, or a small set of modules was found that makes it track
  report::ScenarioSummary row;
  bool localized = false;  // the bisection ran (the run failed, not as an error)
  Localization localization;
  int64_t candidates = 0;   // the modules bisected (localize.h candidate_leaves)
  double probe_bound = 0;   // 2·log2(candidates) + 2
  int64_t probe_steps = 0;  // each probe's steps
  // what keeping the set costs: the probe that kept exactly the set (one more probe when the search ran none),
  // against the failing run (ms/step NaN, memory 0 where unmeasured)
  bool measured_extra = false;  // that probe was run after the search, only to measure it
  double kept_ms_per_step = 0, failing_ms_per_step = 0;
  int64_t kept_peak_memory_bytes = 0, failing_peak_memory_bytes = 0;
  std::string fix;  // no set found: the fix where the strategy says it (localize.h fix_without_modules)
};

struct LocalizeResult {
  std::string skipped;  // non-empty: nothing ran, and why (no CUDA device): exit 77
  std::vector<ScenarioLocalization> scenarios;
  report::RunSummary summary;  // one row per scenario (ScenarioLocalization::row)
  std::string reports_dir;     // the published run directory
  // 77 skipped; 0 every scenario tracks or was localized; 1 one could not be (no small set, an error, no module)
  int exit_code() const;
};

// Bad input (a missing reference, a data-parallel scenario, an --out that may not be replaced) throws before anything
// trains or is written.
LocalizeResult localize_scenarios(const LocalizeOptions& o, std::ostream& log);

}  // namespace ampcheck::usecases
