// The run directory that `run`, `check` and `judge` write (--out): when existing files there may be replaced, and a
// scenario's result trajectory file with its provenance.
#pragma once

#include "cli/commands.h"
#include "reference/trajectory_file.h"

#include <string>
#include <vector>

namespace ampcheck::cli {

// The overwrite rule: reports/latest (the default --out) is, by its name, replaced by every run; any other --out
// keeps its files unless --force.
bool may_overwrite(const RunOptions& opts);

// "<path>: exists; refusing to overwrite. HINT: pass --force to replace it"
std::string refusing_to_overwrite(const std::string& path);

// Under the overwrite rule, before anything is written: throws for the first of `names` (relative to opts.out_dir)
// that exists, its HINT adding "or another --out".
void refuse_existing_outputs(const RunOptions& opts, const std::vector<std::string>& names);

// check / run / validate, before any training: the run directory's files these scenario files would write (each
// scenario's <name>.h5 and the four reports) under the overwrite rule — a run that would be refused at the end is
// refused at the start (exit 2, nothing trained, nothing written).
void refuse_existing_run_outputs(const std::vector<std::string>& files, const RunOptions& opts);

// A scenario's result file: the scenario's provenance on `device` (engine::provenance), the run's status, error and
// engine path, and its trajectory. check adds the verdict.
reference::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                      const engine::ScenarioResult& r);

// Writes opts.out_dir/file_name under the overwrite rule (throws naming the file if it exists and may not be replaced).
void write_result(const RunOptions& opts, const std::string& file_name, const reference::TrajectoryFile& tf);

}  // namespace ampcheck::cli
