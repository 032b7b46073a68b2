// `ampcheck check --jobs N`, check's process pool (check_pool.h): independent scenarios in parallel processes. Each
// scenario runs as its own `ampcheck check FILE --jobs 1` child (a fresh process: LibTorch's global numerics flags,
// autocast state and allocator statistics stay per scenario), writing into <out>/.parts/<index>/ (its output in
// <out>/.parts/<index>.log); the parent keeps at most N children running, then merges their summary.json rows in the
// order of the files and moves their trajectory files into <out>. Each child gets cores / N intra-op threads
// (OMP_NUM_THREADS), so N children use the cores once. Each child dies with the parent (PR_SET_PDEATHSIG): a killed
// `check --jobs` leaves no scenario running.
#include "usecases/check_pool.h"
#include "usecases/scenario_files.h"
#include "usecases/run_directory.h"
#include "io/files.h"

#include "engine/device.h"
#include "verdict/kind.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ftw.h>
#include <sys/stat.h>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace ampcheck::usecases {

int64_t default_jobs(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) return 1;  // one GPU: scenarios would contend for it and spoil its timings
  if (device.empty() || device == "auto")
    if (engine::resolve_device("auto").is_cuda()) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

namespace {

pid_t spawn(const std::vector<std::string>& args, const std::string& log, int threads) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("check --jobs: fork failed");
  if (pid == 0) {
    // dies with this process (kept across exec): a SIGKILLed `check --jobs` leaves no scenario training on; a parent
    // that died before the prctl is seen by getppid() (the child was re-parented)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(4);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) ::dup2(::fileno(stdout), 2);
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::perror("execv /proc/self/exe");
    ::_exit(127);
  }
  return pid;
}

std::string tail_of(const std::string& path, size_t max_chars) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "";
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s.size() > max_chars ? s.substr(s.size() - max_chars) : s;
}

}  // namespace

namespace {

// Each scenario in its own `ampcheck check` child writing <parts>/<index>/, at most `jobs` at once; their exit codes.
std::vector<int> run_children(const ScenarioPlan& plan, const RunOptions& opts, int64_t jobs, const std::string& parts,
                              std::ostream& log) {
  const auto& scenarios = plan.scenarios;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max<int>(1, cores / static_cast<int>(jobs));
  std::map<pid_t, size_t> running;
  std::vector<int> status(scenarios.size(), -1);
  size_t next = 0, done = 0;
  auto part_dir = [&](size_t i) { return parts + "/" + std::to_string(i); };
  while (done < scenarios.size()) {
    while (next < scenarios.size() && static_cast<int64_t>(running.size()) < jobs) {
      std::vector<std::string> args = {"ampcheck", "check", scenarios[next].file, "--jobs",
                                       "1",        "--out", part_dir(next),       "--force"};
      if (!opts.device.empty()) args.insert(args.end(), {"--device", opts.device});
      if (!opts.references.empty()) args.insert(args.end(), {"--references", opts.references});
      if (opts.steps > 0) args.insert(args.end(), {"--steps", std::to_string(opts.steps)});
      if (opts.engine != "stock") args.insert(args.end(), {"--engine", opts.engine});
      if (opts.strict) args.push_back("--strict");  // (each process decides its scenarios' pass)
      // the child's log beside its directory (<parts>/<index>.log), which the child writes whole (empty, made by it)
      running[spawn(args, part_dir(next) + ".log", threads)] = next;
      ++next;
    }
    int st = 0;
    const pid_t pid = ::wait(&st);
    if (pid < 0) throw std::runtime_error("check --jobs: wait failed");
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const size_t i = it->second;
    running.erase(it);
    status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    ++done;
    log << "[" << done << "/" << scenarios.size() << "] " << io::file_stem(scenarios[i].file)
        << (status[i] == 0   ? ""
            : status[i] == 1 ? "  (FAIL)"
                             : "  (exit " + std::to_string(status[i]) + ")")
        << "\n"
        << std::flush;
  }
  return status;
}

}  // namespace

report::RunSummary check_in_processes(const ScenarioPlan& plan, const RunOptions& opts, int64_t jobs,
                                      std::ostream& log) {
  log << plan.scenarios.size() << " scenarios, " << jobs << " at a time\n" << std::flush;
  const std::string parts = opts.out_dir + "/.parts";
  io::remove_tree(parts);
  io::make_dirs(parts);
  const std::vector<int> status = run_children(plan, opts, jobs, parts, log);
  auto part_dir = [&](size_t i) { return parts + "/" + std::to_string(i); };
  report::RunSummary out;
  std::vector<report::ScenarioSummary> rows;
  const bool overwrite = may_overwrite(opts);
  for (size_t i = 0; i < plan.scenarios.size(); ++i) {
    const std::string summary = part_dir(i) + "/summary.json";
    if (!io::file_exists(summary)) {  // the child died before writing its summary: keep its output in the message
      report::ScenarioSummary row;
      row.name = io::file_stem(plan.scenarios[i].file);
      row.verdict = verdict::kNoVerdict;
      row.message = "the scenario's process ended with exit code " + std::to_string(status[i]) +
                    " and wrote no summary; its output ends:\n" + tail_of(part_dir(i) + ".log", 2000);
      rows.push_back(row);
      continue;
    }
    const auto part = report::read_summary_json(summary);
    if (out.device_class.empty()) out = part;  // the provenance of the first scenario that ran
    for (auto row : part.scenarios) {
      if (!row.trajectory_file.empty()) {
        const std::string from = part_dir(i) + "/" + row.trajectory_file, to = opts.out_dir + "/" + row.trajectory_file;
        if (io::file_exists(to) && !overwrite) {
          row.pass = false;
          row.message = refusing_to_overwrite(to);
        } else if (io::file_exists(from) && std::rename(from.c_str(), to.c_str()) != 0) {
          row.pass = false;
          row.message = to + ": could not move the trajectory there from " + from;
        }
      }
      rows.push_back(row);
    }
  }
  io::remove_tree(parts);
  out.scenarios = std::move(rows);
  return out;
}

}  // namespace ampcheck::usecases
