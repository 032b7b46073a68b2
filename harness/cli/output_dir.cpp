// The run directory's rules (output_dir.h).
#include "cli/output_dir.h"

#include "distributed/process_group.h"
#include "io/files.h"
#include "run/provenance.h"

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
#include <fstream>
#include <stdexcept>

namespace ampcheck::cli {

bool may_overwrite(const RunOptions& opts) { return opts.force || opts.out_dir == RunOptions{}.out_dir; }

std::string refusing_to_overwrite(const std::string& path) {
  return path + ": exists; refusing to overwrite. HINT: pass --force to replace it";
}

void refuse_existing_outputs(const RunOptions& opts, const std::vector<std::string>& names) {
  if (may_overwrite(opts)) return;
  for (const auto& name : names)
    if (file_exists(opts.out_dir + "/" + name))
      throw std::runtime_error(refusing_to_overwrite(opts.out_dir + "/" + name) + ", or another --out");
}

void refuse_existing_run_outputs(const std::vector<std::string>& files, const RunOptions& opts) {
  for (const auto& f : files) load_for_run(f, opts);  // a bad scenario file is named before the directory
  check_run_directory_replaceable(opts);
}

namespace {

constexpr const char* kMarker = ".ampcheck-run";
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

// A name ampcheck writes into a run directory (runs from before the marker have only these).
bool ampcheck_output_name(const std::string& n) {
  return n == kMarker || n == "summary.json" || n == "junit.xml" || n == "summary.md" || n == "report.html" ||
         n == ".parts" || n == "log.txt" || ends_with(n, ".h5") || ends_with(n, ".ranks") || ends_with(n, ".tmp");
}

std::string strip_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::pair<std::string, std::string> parent_and_name(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// The staging directories of processes that are gone, beside out: <parent>/.<name>.partial-<pid>.
void remove_stale_staging(const std::string& out) {
  const auto [parent, name] = parent_and_name(out);
  for (const auto& s : io::stale_pid_entries(parent, "." + name + ".partial-")) io::remove_tree(s);
}

}  // namespace

void check_run_directory_replaceable(const RunOptions& opts) {
  const std::string out = strip_slashes(opts.out_dir);
  if (out.empty()) throw std::runtime_error("--out: an empty path; expected a directory");
  const std::string last = parent_and_name(out).second;
  if (out == "/" || last == "." || last == "..")
    throw std::runtime_error("--out " + out + ": expected a run directory of its own (it is written whole, then put in "
                             "place), not '" + last + "'. HINT: name a new directory, e.g. --out " +
                             (out == "/" ? std::string("/tmp") : out) + "/run");
  // a joined rank other than 0 writes its rank files into rank 0's directory, which rank 0 checked
  const char* rank = std::getenv("RANK");
  if (dist::in_distributed_environment() && rank && std::string(rank) != "0") return;
  struct stat st {};
  if (::stat(out.c_str(), &st) != 0) return;  // a new directory
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(out + ": exists and is not a directory; expected a run directory");
  auto names = entries(out);
  // a job's other ranks may already have made their <scenario>.ranks directories here (rank 0 checks, they do not)
  if (dist::in_distributed_environment())
    names.erase(std::remove_if(names.begin(), names.end(), [](const std::string& n) { return ends_with(n, ".ranks"); }),
                names.end());
  if (names.empty()) return;
  if (!may_overwrite(opts)) throw std::runtime_error(refusing_to_overwrite(out) + ", or another --out");
  bool marker = false;
  for (const auto& n : names) marker = marker || n == kMarker;
  if (marker) return;
  for (const auto& n : names)
    if (!ampcheck_output_name(n))
      throw std::runtime_error(out + ": not a run directory of ampcheck (it holds '" + n +
                               "'); refusing to replace it, with or without --force. HINT: name a new or empty "
                               "directory with --out");
}

void refuse_incomplete_run_directory(const std::string& dir) {
  if (file_exists(dir + "/" + kIncomplete))
    throw std::runtime_error(dir + ": a run directory still being written, or left by a command that was killed (its "
                             "INCOMPLETE marker is present). HINT: re-run the command that writes it");
}

RunDirectory::RunDirectory(const RunOptions& opts) : out_(strip_slashes(opts.out_dir)) {
  check_run_directory_replaceable(opts);
  // --out a symbolic link to a directory: the directory it names is the one replaced (the link stays)
  struct stat lst {};
  if (::lstat(out_.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    if (char* real = ::realpath(out_.c_str(), nullptr)) {
      out_ = real;
      std::free(real);
    }
  }
  if (dist::in_distributed_environment()) {  // the ranks of a torchrun / srun job share --out: written in place
    direct_ = true;
    staging_ = out_;
    make_dirs(out_);
    return;
  }
  const auto [parent, name] = parent_and_name(out_);
  make_dirs(parent);
  remove_stale_staging(out_);
  staging_ = parent + "/." + name + ".partial-" + std::to_string(::getpid());
  io::remove_tree(staging_);
  if (::mkdir(staging_.c_str(), 0777) != 0)
    throw std::runtime_error(staging_ + ": cannot create the staging directory (" + std::strerror(errno) + ")");
  std::ofstream(staging_ + "/" + kIncomplete)
      << "ampcheck is writing this run directory; it is moved to " << out_ << " when complete\n";
  std::ofstream(staging_ + "/" + kMarker) << "a run directory written by ampcheck\n";
}

RunDirectory::~RunDirectory() {
  if (!published_ && !direct_) io::remove_tree(staging_);
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
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) != 0)
    throw std::runtime_error(out_ + ": cannot replace the previous run (" + std::strerror(errno) + ")");
  published_ = true;
  io::remove_tree(staging_);  // now the previous run
}

reference::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                      const engine::ScenarioResult& r) {
  reference::TrajectoryFile tf;
  tf.attributes = engine::provenance(sc, device);
  tf.attributes["status"] = engine::status_name(r.outcome.status);
  tf.attributes["error"] = r.outcome.error;
  tf.attributes["engine"] = r.engine;
  tf.trajectory = r.trajectory;
  return tf;
}

void write_result(const RunOptions& opts, const std::string& file_name, const reference::TrajectoryFile& tf) {
  reference::write_trajectory(opts.out_dir + "/" + file_name, tf, may_overwrite(opts));
}

}  // namespace ampcheck::cli
