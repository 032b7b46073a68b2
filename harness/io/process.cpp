// A command run as a child process with a time limit (process.h).
#include "io/process.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace ampcheck::io {

std::string ProcessResult::describe() const {
  if (!started) return "could not be started";
  if (timed_out) return "stopped at its time limit";
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exit " + std::to_string(exit_code);
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& log_path, double timeout_s) {
  if (argv.empty()) throw std::invalid_argument("run_process: an empty command");
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (log < 0) throw std::runtime_error(log_path + ": cannot open the log for writing");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw std::runtime_error("fork failed for " + argv[0]);
  }
  if (pid == 0) {
    ::setpgid(0, 0);                     // a group of its own: a timeout stops whatever it started
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with this process
    if (::getppid() != parent) ::_exit(4);
    ::dup2(log, 1);
    ::dup2(log, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "ampcheck: cannot execute %s\n", argv[0].c_str());
    ::_exit(127);
  }
  ::close(log);
  ::setpgid(pid, pid);  // (also here: no race with the child's own call)
  ProcessResult r;
  int status = 0;
  bool term_sent = false;
  std::chrono::steady_clock::time_point term_at;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0) throw std::runtime_error("waitpid failed for " + argv[0]);
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0).count();
    if (timeout_s > 0 && elapsed > timeout_s && !term_sent) {
      r.timed_out = true;
      term_sent = true;
      term_at = now;
      ::kill(-pid, SIGTERM);  // the recorder writes its file as interrupted
    }
    if (term_sent && std::chrono::duration<double>(now - term_at).count() > 10) ::kill(-pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);  // anything of its group still running (e.g. a launcher's workers)
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    r.started = r.exit_code != 127;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace ampcheck::io
