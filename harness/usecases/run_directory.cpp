// The run directory's rules (run_directory.h).
#include "usecases/run_directory.h"

#include "usecases/scenario_files.h"

#include "distributed/process_group.h"
#include "io/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace ampcheck::usecases {

bool may_overwrite(const RunOptions& opts) { return opts.force || opts.out_dir == RunOptions{}.out_dir; }

std::string refusing_to_overwrite(const std::string& path) {
  return path + ": exists; refusing to overwrite. HINT: pass --force to replace it";
}

void refuse_existing_outputs(const RunOptions& opts, const std::vector<std::string>& names) {
  if (may_overwrite(opts)) return;
  for (const auto& name : names)
    if (io::file_exists(opts.out_dir + "/" + name))
      throw std::runtime_error(refusing_to_overwrite(opts.out_dir + "/" + name) + ", or another --out");
}

void refuse_existing_run_outputs(const std::vector<std::string>& files, const RunOptions& opts) {
  refuse_duplicate_scenario_names(files, opts);  // a bad scenario file is named before the directory
  check_run_directory_replaceable(opts);
}

void refuse_duplicate_scenario_names(const std::vector<std::string>& files, const RunOptions& opts) {
  std::vector<PlannedScenario> loaded;
  for (const auto& f : files) loaded.push_back(plan_scenario(f, opts));
  refuse_duplicate_scenario_names(loaded);
}

namespace {

constexpr const char* kMarker = ".ampcheck-run";
// the marker's first line, fixed: a file named .ampcheck-run with other content is not ampcheck's (the marker of
// runs written before it had this one line)
constexpr const char* kMarkerFirstLine = "a run directory written by ampcheck";
constexpr const char* kIncomplete = "INCOMPLETE";

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw std::runtime_error(dir + ": cannot list (" + std::strerror(errno) + ")");
  for (dirent* e; (e = ::readdir(d));) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Does dir hold ampcheck's marker: a regular file (not a symbolic link, not a directory) named .ampcheck-run whose
// first line is kMarkerFirstLine? Only such a directory is ever replaced or deleted.
bool holds_marker(const std::string& dir) {
  const std::string path = dir + "/" + kMarker;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  const std::string first(kMarkerFirstLine);
  return n > static_cast<ssize_t>(first.size()) && std::string(buf, first.size()) == first && buf[first.size()] == '\n';
}

// Writes the marker into dir (a directory this process just made, or one it was allowed to write); throws naming it.
void write_marker(const std::string& dir) {
  io::write_file_atomically(dir + "/" + kMarker,
                            std::string(kMarkerFirstLine) +
                                "\n(this file lets ampcheck replace this directory with a "
                                "new run under --force; ampcheck replaces or deletes no directory without it)\n");
}

std::string strip_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The staging directories of processes that are gone, beside out: <parent>/.<name>.partial-<pid> with a dead pid,
// and only a real directory holding the marker (written first) or nothing (killed right after its mkdir).
void remove_stale_staging(const std::string& out) {
  const auto [parent, name] = io::parent_and_name(out);
  for (const auto& s : io::stale_pid_entries(parent, "." + name + ".partial-")) {
    struct stat st {};
    if (::lstat(s.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (holds_marker(s) || entries(s).empty()) io::remove_tree(s);
  }
}

// What the symbolic link `path` names ("?" if it cannot be read).
std::string link_target(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// "--out X" or "--out X (a symbolic link to Y)": what the user named and what it is.
std::string described(const std::string& named, const std::string& real) {
  return named == real ? named : named + " (a symbolic link to " + real + ")";
}

}  // namespace

void check_run_directory_replaceable(const RunOptions& opts) {
  const std::string out = strip_slashes(opts.out_dir);
  if (out.empty()) throw std::runtime_error("--out: an empty path; expected a directory");
  const std::string last = io::parent_and_name(out).second;
  if (out == "/" || last == "." || last == "..")
    throw std::runtime_error("--out " + out +
                             ": expected a run directory of its own (it is written whole, then put in "
                             "place), not '" +
                             last + "'. HINT: name a new directory, e.g. --out " +
                             (out == "/" ? std::string("/tmp") : out) + "/run");
  // a joined rank other than 0 writes its rank files into rank 0's directory, which rank 0 checked
  const char* rank = std::getenv("RANK");
  if (distributed::in_distributed_environment() && rank && std::string(rank) != "0") return;
  struct stat lst {
  }, st{};
  if (::lstat(out.c_str(), &lst) != 0) return;  // a new directory
  if (::stat(out.c_str(), &st) != 0) {  // a symbolic link to nothing: the run would be trained, then not published
    const std::string why = std::strerror(errno);
    if (S_ISLNK(lst.st_mode))
      throw std::runtime_error("--out " + out + ": a symbolic link to " + link_target(out) +
                               ", which does not exist (" + why +
                               "). HINT: create the directory it names, or name another --out");
    throw std::runtime_error("--out " + out + ": cannot be examined (" + why + "). HINT: name another --out");
  }
  std::string real = out;
  if (S_ISLNK(lst.st_mode))
    if (char* r = ::realpath(out.c_str(), nullptr)) {
      real = r;
      std::free(r);
    }
  const std::string what = described(out, real);
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(what +
                             ": exists and is not a directory; expected a run directory. HINT: name a new "
                             "directory with --out");
  auto names = entries(out);
  // a job's other ranks may already have made their <scenario>.ranks directories here (rank 0 checks, they do not)
  if (distributed::in_distributed_environment())
    names.erase(std::remove_if(names.begin(), names.end(), [](const std::string& n) { return ends_with(n, ".ranks"); }),
                names.end());
  const bool marker = holds_marker(out);
  if (names.empty() || (marker && names.size() == 1)) return;  // empty, or ampcheck's marker only: nothing to lose
  if (!marker) {
    const bool named_by_marker = std::find(names.begin(), names.end(), kMarker) != names.end();
    throw std::runtime_error(
        what + ": not a run directory of ampcheck (" +
        (named_by_marker ? std::string("its .ampcheck-run is not ampcheck's marker: not a regular file, or other text")
                         : "no .ampcheck-run marker; it holds '" + names.front() + "'" +
                               (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "")) +
        "): ampcheck replaces only a directory it wrote, so it refuses to write here, with or without --force, and "
        "deletes nothing. HINT: name a new or empty directory with --out (a run directory ampcheck wrote before it "
        "marked its runs has no marker: remove or rename it yourself if you no longer need it)");
  }
  if (!may_overwrite(opts)) throw std::runtime_error(refusing_to_overwrite(what) + ", or another --out");
}

void open_run_directory_in_place(const std::string& dir) {
  RunOptions opts;
  opts.out_dir = dir;
  opts.force = true;  // an earlier run of ours is resumed, not replaced
  check_run_directory_replaceable(opts);
  io::make_dirs(strip_slashes(dir));
  if (!holds_marker(strip_slashes(dir))) write_marker(strip_slashes(dir));
}

void refuse_incomplete_run_directory(const std::string& dir) {
  if (io::file_exists(dir + "/" + kIncomplete))
    throw std::runtime_error(dir +
                             ": a run directory still being written, or left by a command that was killed (its "
                             "INCOMPLETE marker is present). HINT: re-run the command that writes it");
}

RunDirectory::RunDirectory(const RunOptions& opts, bool single_writer) : out_(strip_slashes(opts.out_dir)) {
  check_run_directory_replaceable(opts);
  // --out a symbolic link to a directory: the directory it names is the one replaced (the link stays)
  struct stat lst {};
  if (::lstat(out_.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    if (char* real = ::realpath(out_.c_str(), nullptr)) {
      out_ = real;
      std::free(real);
    }
  }
  const auto [parent, name] = io::parent_and_name(out_);
  if (!single_writer && distributed::in_distributed_environment()) {  // a job's ranks share --out: written in place
    direct_ = true;
    staging_ = out_;
    io::make_dirs(parent);
    const bool made = ::mkdir(out_.c_str(), 0777) == 0;
    if (!made && errno != EEXIST)
      throw std::runtime_error(out_ + ": cannot create the run directory (" + std::strerror(errno) + ")");
    // marked from the start: by the rank that made it, or by rank 0, which checked it (empty, or marked) above — a
    // rank other than 0 never marks a directory it did not make (it may be the user's, which rank 0 refuses)
    const char* rank = std::getenv("RANK");
    if (made || !rank || std::string(rank) == "0")
      if (!holds_marker(out_)) write_marker(out_);
    return;
  }
  io::make_dirs(parent);
  remove_stale_staging(out_);
  staging_ = parent + "/." + name + ".partial-" + std::to_string(::getpid());
  // a leftover of an earlier process with this pid: removed only if it is ampcheck's (marked, or empty)
  struct stat old {};
  if (::lstat(staging_.c_str(), &old) == 0) {
    if (!S_ISDIR(old.st_mode) || !(holds_marker(staging_) || entries(staging_).empty()))
      throw std::runtime_error(staging_ +
                               ": exists and is not ampcheck's staging directory; refusing to remove it. "
                               "HINT: move it away, or name another --out");
    io::remove_tree(staging_);
  }
  if (::mkdir(staging_.c_str(), 0777) != 0)
    throw std::runtime_error(staging_ + ": cannot create the staging directory (" + std::strerror(errno) + ")");
  write_marker(staging_);  // first: a staging directory a kill leaves is recognised (and removed) by its marker
  io::write_file_atomically(staging_ + "/" + kIncomplete,
                            "ampcheck is writing this run directory; it is moved to " + out_ + " when complete\n");
}

RunDirectory::~RunDirectory() {
  if (!published_ && !direct_ && !kept_) io::remove_tree(staging_);
}

RunOptions RunDirectory::staged(const RunOptions& opts) const {
  RunOptions o = opts;
  o.out_dir = staging_;
  o.force = true;
  return o;
}

std::string RunDirectory::published_path(const std::string& path) const {
  if (path.rfind(staging_, 0) == 0) return out_ + path.substr(staging_.size());
  return path;
}

void RunDirectory::publish() {
  if (direct_) return;
  if (::unlink((staging_ + "/" + kIncomplete).c_str()) != 0)
    throw std::runtime_error(staging_ + "/" + kIncomplete + ": cannot remove (" + std::strerror(errno) + ")");
  // the staging directory's files are on disk before it takes the name (a crash of the machine then leaves either)
  if (int fd = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(staging_.c_str(), out_.c_str()) == 0) {  // --out did not exist, or was empty
    published_ = true;
    return;
  }
  if (errno != EEXIST && errno != ENOTEMPTY)
    throw std::runtime_error(out_ + ": cannot move the run into place (" + std::strerror(errno) + ")");
  // checked at the start; checked again: the directory exchanged (then deleted) must still be ampcheck's
  if (!holds_marker(out_)) {
    kept_ = true;
    throw std::runtime_error(out_ +
                             ": no longer a run directory of ampcheck (its marker is gone); the new run is left "
                             "in " +
                             staging_ + ". HINT: move it where you want it");
  }
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) != 0)
    throw std::runtime_error(out_ + ": cannot replace the previous run (" + std::strerror(errno) + ")");
  published_ = true;
  io::remove_tree(staging_);  // now the previous run (marked: checked above)
}

const OwnedFileKind kReferenceFile{"an FP32 reference", "kind", {"fp32-reference", "external-fp32-reference"}};
const OwnedFileKind kGoldenFile{"a golden trajectory", "golden_class", {}};

void refuse_unless_replaceable_file(const std::string& path, bool force, const OwnedFileKind& kind) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // a new file
  if (!force) throw std::runtime_error(refusing_to_overwrite(path));
  const std::string hint = ". HINT: name another output file (ampcheck replaces only " + kind.description +
                           " it wrote, and deletes nothing else)";
  if (S_ISLNK(st.st_mode))
    throw std::runtime_error(path + ": a symbolic link, not " + kind.description +
                             " ampcheck wrote; refusing to "
                             "replace it, with or without --force" +
                             hint);
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(path + ": not a regular file; refusing to replace it, with or without --force" + hint);
  std::string why;
  try {
    const auto f = trajectory::read_trajectory_contained(path, trajectory::Columns::LossRequired);
    const std::string value = trajectory::attribute_text(f.attributes, kind.attribute);
    const bool ok = kind.values.empty() ? !value.empty()
                                        : std::find(kind.values.begin(), kind.values.end(), value) != kind.values.end();
    if (ok) return;
    why = value.empty() ? "a trajectory file without the attribute '" + kind.attribute + "' (a recorded run?)"
                        : "its attribute '" + kind.attribute + "' is '" + value + "'";
  } catch (const std::exception& e) {
    why = "not a trajectory file ampcheck wrote (" + std::string(e.what()) + ")";
  }
  throw std::runtime_error(path + ": not " + kind.description + " ampcheck wrote (" + why +
                           "); refusing to replace "
                           "it, with or without --force" +
                           hint);
}

void write_result(const RunOptions& opts, const std::string& file_name, const trajectory::TrajectoryFile& tf) {
  trajectory::write_trajectory(opts.out_dir + "/" + file_name, tf, may_overwrite(opts));
}

}  // namespace ampcheck::usecases
