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

// The run directory written whole. The command writes into a staging directory beside --out
// (<parent>/.<name>.partial-<pid>, with an INCOMPLETE marker while it is written) and publish() puts it in place in
// one rename — renameat2(RENAME_EXCHANGE) where --out exists and may be replaced, the previous run then removed. So a
// SIGKILL at any moment leaves --out as it was (the previous complete run, or none), never a half-written run, plus
// at most a staging directory, which the next command writing beside it removes once its process is gone.
// A rank of a torchrun / srun job (dist::in_distributed_environment) writes --out in place: the job's ranks share it.
// Which --out may be replaced: one that does not exist or is empty; else, under the overwrite rule (--force, or the
// default reports/latest), a run directory of ampcheck — holding the .ampcheck-run marker, or only files ampcheck
// writes (a run from before the marker). Anything else is refused, with or without --force: the command deletes no
// directory that is not its own.
class RunDirectory {
 public:
  // Checks that --out may be written (throws naming it: "exists; refusing to overwrite" or "not a run directory"),
  // removes stale staging directories beside it, creates this process's staging directory.
  explicit RunDirectory(const RunOptions& opts);
  ~RunDirectory();  // not published: the staging directory is removed
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& staging() const { return staging_; }
  const std::string& final_dir() const { return out_; }
  // opts writing into the staging directory (out_dir = staging, force: the directory is this process's own)
  RunOptions staged(const RunOptions& opts) const;
  // a path under the staging directory as it will read once published
  std::string published_path(const std::string& path) const;
  // Puts the staging directory in place of --out (atomically), then removes the previous run.
  void publish();

 private:
  std::string out_, staging_;
  bool published_ = false, direct_ = false;
};

// Before any training, without creating anything: throws as RunDirectory's constructor would.
void check_run_directory_replaceable(const RunOptions& opts);
// A run directory being written (its INCOMPLETE marker present): compare / report refuse it (throws naming it).
void refuse_incomplete_run_directory(const std::string& dir);

// A scenario's result file: the scenario's provenance on `device` (engine::provenance), the run's status, error and
// engine path, and its trajectory. check adds the verdict.
reference::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                      const engine::ScenarioResult& r);

// Writes opts.out_dir/file_name under the overwrite rule (throws naming the file if it exists and may not be replaced).
void write_result(const RunOptions& opts, const std::string& file_name, const reference::TrajectoryFile& tf);

}  // namespace ampcheck::cli
