// Starting and watching the ranks of a job (spawn.h).
#include "distributed/spawn.h"

#include "io/text.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ampcheck::distributed {

namespace {
using Clock = std::chrono::steady_clock;

std::string tail(const std::string& path, size_t max_lines = 12) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
    out += "\n    " + lines[i];
  return out;
}

const char* signal_name(int s) {
  switch (s) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGINT:
      return "SIGINT";
    case SIGBUS:
      return "SIGBUS";
    default:
      return "a signal";
  }
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this program's path (/proc/self/exe)");
  buf[n] = '\0';
  return buf;
}

// The ranks' logs: files in log_dir, or anonymous in-memory files read back through /proc/self/fd.
struct Logs {
  std::vector<std::string> paths;
  std::vector<int> memfds;
  Logs(const SpawnSpec& spec) {
    for (int64_t k = 0; k < spec.world_size; ++k) {
      if (!spec.log_dir.empty()) {
        paths.push_back(spec.log_dir + "/rank" + std::to_string(k) + ".log");
        continue;
      }
      const int fd = ::memfd_create(("ampcheck-rank" + std::to_string(k)).c_str(), MFD_CLOEXEC);
      if (fd < 0) throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
      memfds.push_back(fd);
      paths.push_back("/proc/self/fd/" + std::to_string(fd));
    }
  }
  ~Logs() {
    for (int fd : memfds) ::close(fd);
  }
  // the descriptor a child writes its output to (opened in the child for a file)
  int open_in_child(int64_t k) const {
    if (!memfds.empty()) return memfds[k];
    return ::open(paths[k].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  std::string where(int64_t k) const { return memfds.empty() ? " (" + paths[k] + ")" : ""; }
};
}  // namespace

c10::intrusive_ptr<c10d::TCPStore> spawn_ranks(const SpawnSpec& spec) {
  const int64_t world = spec.world_size;
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(spec.store_timeout_s * 1000));
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  const std::string port = std::to_string(store->getPort());
  const std::string exe = self_exe();
  const Logs logs(spec);
  std::vector<pid_t> pids(world, -1);
  std::ofstream pid_file;
  if (!spec.log_dir.empty()) pid_file.open(spec.log_dir + "/pids");
  std::vector<bool> running(world, false);
  auto kill_all = [&]() {
    for (int64_t k = 0; k < world; ++k)
      if (running[k]) ::kill(pids[k], SIGTERM);
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until) {
      bool any = false;
      for (int64_t k = 0; k < world; ++k)
        if (running[k]) {
          if (::waitpid(pids[k], nullptr, WNOHANG) == pids[k]) running[k] = false;
          else
            any = true;
        }
      if (!any) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int64_t k = 0; k < world; ++k)
      if (running[k]) {
        ::kill(pids[k], SIGKILL);
        ::waitpid(pids[k], nullptr, 0);
        running[k] = false;
      }
  };
  const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string threads = std::to_string(std::max<long>(1, cores / world));
  try {
    for (int64_t k = 0; k < world; ++k) {
      std::vector<std::string> args = {exe};
      for (std::string a : spec.args) {
        for (size_t at = a.find("{rank}"); at != std::string::npos; at = a.find("{rank}", at))
          a.replace(at, 6, std::to_string(k));
        args.push_back(a);
      }
      const pid_t launcher = ::getpid();
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
      if (pid == 0) {  // the rank: dies with the launcher, output to its log
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        // the launcher died before the prctl: the rank was re-parented (to init or to a subreaper, not always pid 1)
        if (::getppid() != launcher) ::_exit(4);
        const int fd = logs.open_in_child(k);
        if (fd >= 0) {
          ::dup2(fd, 1);
          ::dup2(fd, 2);
          if (logs.memfds.empty()) ::close(fd);
        }
        ::setenv("RANK", std::to_string(k).c_str(), 1);
        ::setenv("LOCAL_RANK", std::to_string(k).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", port.c_str(), 1);
        ::setenv("AMPCHECK_STORE_HOSTED", "1", 1);
        // the ranks share this machine's cores (as torchrun does, unless the user set it)
        ::setenv("OMP_NUM_THREADS", threads.c_str(), 0);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(exe.c_str(), argv.data());
        ::_exit(127);
      }
      pids[k] = pid;
      running[k] = true;
      if (pid_file.is_open()) pid_file << k << " " << pid << "\n" << std::flush;
      if (spec.announce) std::cout << "  rank " << k << ": pid " << pid << ", log " << logs.paths[k] << "\n";
    }
    pid_file.close();
    std::cout << std::flush;

    const auto start = Clock::now();
    std::optional<Clock::time_point> first_done;
    int64_t first_done_rank = -1;
    const auto grace = std::chrono::milliseconds(static_cast<int64_t>(spec.grace_s * 1000));
    for (;;) {
      bool any = false;
      for (int64_t k = 0; k < world; ++k) {
        if (!running[k]) continue;
        int status = 0;
        const pid_t w = ::waitpid(pids[k], &status, WNOHANG);
        if (w == 0) {
          any = true;
          continue;
        }
        running[k] = false;
        const double t = std::chrono::duration<double>(Clock::now() - start).count();
        std::ostringstream why;
        if (WIFSIGNALED(status)) {
          why << "rank " << k << " (pid " << pids[k] << ") was killed by " << signal_name(WTERMSIG(status)) << " after "
              << std::fixed << std::setprecision(1) << t << " s";
        } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
          why << "rank " << k << " (pid " << pids[k] << ") exited with code " << WEXITSTATUS(status) << " after "
              << std::fixed << std::setprecision(1) << t << " s";
        } else {
          if (!first_done) first_done = Clock::now(), first_done_rank = k;
          continue;
        }
        throw std::runtime_error(why.str() + "; the other ranks were stopped. Its log" + logs.where(k) + ":" +
                                 tail(logs.paths[k]));
      }
      if (!any) return store;
      if (first_done && Clock::now() > *first_done + grace) {
        std::string late;
        for (int64_t k = 0; k < world; ++k)
          if (running[k]) late += (late.empty() ? "" : ", ") + std::to_string(k);
        throw std::runtime_error("rank " + late + " still running " + io::number_text(spec.grace_s, 17) +
                                 " s after rank " + std::to_string(first_done_rank) + " finished: stopped (hung?). " +
                                 "Rank " + std::to_string(first_done_rank) +
                                 "'s log:" + tail(logs.paths[first_done_rank], 4));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (...) {
    kill_all();
    throw;
  }
}

}  // namespace ampcheck::distributed
