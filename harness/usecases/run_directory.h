// The run directory that `run`, `check` and `judge` write (--out): when existing files there may be replaced, and a
// scenario's result trajectory file written into it (run::result_file makes it).
#pragma once

#include "usecases/options.h"
#include "trajectory/trajectory_file.h"

#include <string>
#include <vector>

namespace ampcheck::usecases {

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
// Loads every scenario file (a bad one is named) and throws naming both files where two give one `name:` (their
// results, goldens and reports would share one <name>.h5).
void refuse_duplicate_scenario_names(const std::vector<std::string>& files, const RunOptions& opts);

// The run directory written whole. The command writes into a staging directory beside --out
// (<parent>/.<name>.partial-<pid>: the .ampcheck-run marker first, then an INCOMPLETE marker while it is written) and
// publish() puts it in place in one rename — renameat2(RENAME_EXCHANGE) where --out exists and may be replaced, the
// previous run then removed. So a SIGKILL at any moment leaves --out as it was (the previous complete run, or none),
// never a half-written run, plus at most a staging directory, which the next command writing beside it removes once
// its process is gone (and only if it holds the marker, or nothing).
// A rank of a torchrun / srun job (distributed::in_distributed_environment) writes --out in place: the job's ranks
// share it; it is marked when made (by the rank that made it) or by rank 0. Which --out may be replaced: one that does
// not exist, is empty or holds only the marker; else, under the overwrite rule (--force, or the default
// reports/latest), only a run directory of ampcheck — one holding the .ampcheck-run marker (a regular file whose first
// line is ampcheck's). Anything else (a user's recordings, references, a symbolic link to them, a run from before the
// marker) is refused, with or without --force: the command replaces or deletes no directory that is not its own. A
// dangling symbolic link is refused before anything is trained.
class RunDirectory {
 public:
  // Checks that --out may be written (throws naming it: "exists; refusing to overwrite" or "not a run directory"),
  // removes stale staging directories beside it, creates this process's staging directory.
  // single_writer: one rank of a job writes it alone (validate --fleet's rank 0): staged and published as by a lone
  // process, not written in place.
  explicit RunDirectory(const RunOptions& opts, bool single_writer = false);
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
  bool published_ = false, direct_ = false, kept_ = false;
};

// A directory written in place over a long command that can be resumed (sweep): created and marked when new or empty,
// reused when it holds ampcheck's marker; anything else (a user's directory, a file, a link to nothing) is refused,
// naming it, with or without --force.
void open_run_directory_in_place(const std::string& dir);

// Before any training, without creating anything: throws as RunDirectory's constructor would.
void check_run_directory_replaceable(const RunOptions& opts);
// A run directory being written (its INCOMPLETE marker present): compare / report refuse it (throws naming it).
void refuse_incomplete_run_directory(const std::string& dir);

// What a single-file output of ampcheck is (a reference, a golden): the root attribute that marks ampcheck's files of
// that kind and the values it may have (empty: any non-empty value).
struct OwnedFileKind {
  std::string description;  // "an FP32 reference"
  std::string attribute;
  std::vector<std::string> values;
};
extern const OwnedFileKind kReferenceFile;  // attribute kind: fp32-reference (record), external-fp32-reference
extern const OwnedFileKind kGoldenFile;     // attribute golden_class (validate --record)

// Before a single file is written over: nothing if path does not exist; without force "exists; refusing to
// overwrite" (HINT --force); with force, only a file ampcheck wrote of that kind may be replaced — a trajectory file
// (read contained: it may be hostile) with kind's attribute. A user's recording, any other file, a directory or a
// symbolic link is refused with or without --force, naming the file and what it is (exit 2).
void refuse_unless_replaceable_file(const std::string& path, bool force, const OwnedFileKind& kind);

// Writes opts.out_dir/file_name under the overwrite rule (throws naming the file if it exists and may not be replaced).
void write_result(const RunOptions& opts, const std::string& file_name, const trajectory::TrajectoryFile& tf);

}  // namespace ampcheck::usecases
