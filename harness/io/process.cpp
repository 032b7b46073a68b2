// A command run as a child process under a subreaper keeper, with a time limit and forwarded signals (process.h).
#include "io/process.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace ampcheck::io {

namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kNumForwarded = 3;

volatile sig_atomic_t g_group = 0;        // the running command's process group (0: not known yet)
volatile sig_atomic_t g_interrupted = 0;  // the first forwarded signal this process received (0: none)

// This process's handler while a command runs: the signal goes on to the command's group; a second one kills it.
void forward(int sig) {
  const bool again = g_interrupted != 0;
  if (!again) g_interrupted = sig;
  if (g_group > 0) ::kill(-static_cast<pid_t>(g_group), again ? SIGKILL : sig);
}

// ---- the keeper: a forked copy of a multi-threaded process, so only async-signal-safe calls from here ----------

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void sleep_ms(long ms) {
  timespec ts{0, ms * 1000000L};
  ::nanosleep(&ts, nullptr);
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// "/proc/<pid>/task/<pid>/children" into buf (no allocation).
void children_path(pid_t pid, char* buf) {
  char digits[16];
  int n = 0;
  for (long v = pid; v > 0 && n < 15; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  char* o = buf;
  auto put = [&](const char* s) {
    while (*s) *o++ = *s++;
  };
  auto put_pid = [&] {
    for (int i = n - 1; i >= 0; --i) *o++ = digits[i];
  };
  put("/proc/");
  put_pid();
  put("/task/");
  put_pid();
  put("/children");
  *o = '\0';
}

// SIGKILL to every child of this (single-threaded) process: what was re-parented to it, the subreaper, from outside
// the command's group (a process that called setsid); returns how many it signalled.
int kill_children(pid_t self) {
  char path[64];
  children_path(self, path);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  int signalled = 0;
  long pid = 0;
  for (ssize_t i = 0; i <= n; ++i) {
    const char c = i < n ? buf[i] : ' ';
    if (c >= '0' && c <= '9') {
      pid = pid * 10 + (c - '0');
    } else if (pid > 0) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ++signalled;
      pid = 0;
    }
  }
  return signalled;
}

struct Launch {
  char* const* argv;
  char* const* envp;
  int log;                      // the command's stdout and stderr
  int report;                   // the pipe to run_process: the command's pid, then its wait status
  pid_t parent;                 // run_process's process
  bool ignored[kNumForwarded];  // the forwarded signals the parent ignored (nohup): the command inherits that
  sigset_t mask;                // the parent's signal mask before the fork
};

[[noreturn]] void run_keeper(const Launch& l) {
  // in the parent's process group (a terminal's Ctrl-C reaches it too): it ignores the signals the parent forwards,
  // and must outlive its command to reap what the command leaves
  for (int sig : kForwarded) ::signal(sig, SIG_IGN);
  ::sigprocmask(SIG_SETMASK, &l.mask, nullptr);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (::getppid() != l.parent) ::_exit(4);  // the parent died before we got here
  const pid_t self = ::getpid();
  const pid_t cmd = ::fork();
  if (cmd == 0) {
    ::setpgid(0, 0);                     // a group of its own: signals and the timeout reach whatever it starts
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the keeper
    if (::getppid() != self) ::_exit(4);
    for (int i = 0; i < kNumForwarded; ++i) ::signal(kForwarded[i], l.ignored[i] ? SIG_IGN : SIG_DFL);
    ::dup2(l.log, 1);
    ::dup2(l.log, 2);
    ::execvpe(l.argv[0], l.argv, l.envp);
    static const char msg[] = "ampcheck: cannot execute the command (not found, or not executable)\n";
    write_all(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  if (cmd < 0) {
    const pid_t none = -1;
    write_all(l.report, &none, sizeof none);
    ::_exit(5);
  }
  ::setpgid(cmd, cmd);  // (also here: no race with the child's own call)
  write_all(l.report, &cmd, sizeof cmd);
  int status = 0;
  bool parent_gone = false;
  double gone_at = 0;
  for (bool done = false; !done;) {
    int st = 0;
    for (pid_t w; (w = ::waitpid(-1, &st, WNOHANG)) > 0;)
      if (w == cmd) {
        status = st;
        done = true;
      }
    if (done) break;
    // the parent died (SIGKILL, a crash): the command is stopped as a timeout stops it
    if (!parent_gone && ::getppid() != l.parent) {
      parent_gone = true;
      gone_at = now_s();
      ::kill(-cmd, SIGTERM);
    }
    if (parent_gone && now_s() - gone_at > 10) ::kill(-cmd, SIGKILL);
    sleep_ms(20);
  }
  // the command has ended (under a wrapper: `sh -c`, `bash train.sh`, `make`); what it left in its group ends too,
  // with the chance the command had to write its file: the signal that ended the command reached the whole group
  // (forwarded, or the timeout's), a command that exited leaves its group a SIGTERM; SIGKILL 10 s later (at once after
  // SIGKILL)
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ::kill(-cmd, SIGKILL);
  else if (WIFEXITED(status) && ::kill(-cmd, 0) == 0)
    ::kill(-cmd, SIGTERM);
  const double ended = now_s();
  bool killed = false;
  while (::kill(-cmd, 0) == 0 && now_s() - ended < 15) {  // the group is not empty
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (!killed && now_s() - ended > 10) {
      killed = true;
      ::kill(-cmd, SIGKILL);
    }
    sleep_ms(20);
  }
  // then what was re-parented here from outside the group (a process that called setsid): SIGKILL (at most 5 s)
  for (int i = 0; i < 250; ++i) {
    kill_children(self);
    pid_t w;
    while ((w = ::waitpid(-1, nullptr, WNOHANG)) > 0) {
    }
    if (w < 0 && errno == ECHILD) break;
    sleep_ms(20);
  }
  write_all(l.report, &status, sizeof status);
  ::_exit(0);
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGHUP) return "SIGHUP";
  if (sig == SIGKILL) return "SIGKILL";
  return "signal " + std::to_string(sig);
}

void end_by_signal(int sig) {
  std::fflush(nullptr);
  ::signal(sig, SIG_DFL);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  ::sigprocmask(SIG_UNBLOCK, &s, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);
}

std::string ProcessResult::describe() const {
  if (!started) return "could not be started";
  if (timed_out) return "stopped at its time limit";
  if (interrupted_by != 0 && signal != 0)
    return "killed by signal " + std::to_string(signal) + " after ampcheck forwarded " + signal_name(interrupted_by);
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exit " + std::to_string(exit_code);
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& log_path, double timeout_s) {
  if (argv.empty()) throw std::invalid_argument("run_process: an empty command");
  // everything the children use is made before the fork (after it, in a multi-threaded process, no allocation)
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) env_text.push_back(kv);
  }
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& kv : env_text) envp.push_back(kv.data());
  envp.push_back(nullptr);

  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (log < 0) throw std::runtime_error(log_path + ": cannot open the log for writing (" + std::strerror(errno) + ")");
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::close(log);
    throw std::runtime_error("pipe failed for " + argv[0]);
  }
  Launch l{args.data(), envp.data(), log, report[1], ::getpid(), {}, {}};
  // the forwarding handlers, except for a signal this process ignores (nohup): that one stays ignored
  struct sigaction previous[kNumForwarded];
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int i = 0; i < kNumForwarded; ++i) {
    ::sigaction(kForwarded[i], nullptr, &previous[i]);
    l.ignored[i] = previous[i].sa_handler == SIG_IGN;
    sigaddset(&forwarded, kForwarded[i]);
  }
  g_group = 0;
  g_interrupted = 0;
  struct sigaction fwd {};
  fwd.sa_handler = forward;
  sigemptyset(&fwd.sa_mask);
  for (int i = 0; i < kNumForwarded; ++i)
    if (!l.ignored[i]) ::sigaction(kForwarded[i], &fwd, nullptr);
  auto restore = [&] {
    for (int i = 0; i < kNumForwarded; ++i) ::sigaction(kForwarded[i], &previous[i], nullptr);
    g_group = 0;
  };
  // blocked across the fork: the keeper sets its own dispositions before any of them can run there
  ::sigprocmask(SIG_BLOCK, &forwarded, &l.mask);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t keeper = ::fork();
  if (keeper == 0) run_keeper(l);
  ::sigprocmask(SIG_SETMASK, &l.mask, nullptr);
  ::close(log);
  ::close(report[1]);
  if (keeper < 0) {
    ::close(report[0]);
    restore();
    throw std::runtime_error("fork failed for " + argv[0]);
  }
  ProcessResult r;
  pid_t cmd = -1;
  if (read_all(report[0], &cmd, sizeof cmd) && cmd > 0) {
    g_group = cmd;
    if (g_interrupted != 0) ::kill(-cmd, g_interrupted);  // a signal that came before the group was known
  }
  int keeper_status = 0;
  bool term_sent = false, kill_sent = false;
  std::chrono::steady_clock::time_point term_at, interrupted_at;
  bool interrupted_seen = false;
  for (;;) {
    const pid_t w = ::waitpid(keeper, &keeper_status, WNOHANG);
    if (w == keeper) break;
    if (w < 0 && errno != EINTR) {
      restore();
      throw std::runtime_error("waitpid failed for " + argv[0]);
    }
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0).count();
    if (g_interrupted != 0 && !interrupted_seen) {
      interrupted_seen = true;
      interrupted_at = now;
    }
    if (cmd > 0) {
      if (timeout_s > 0 && elapsed > timeout_s && !term_sent && !interrupted_seen) {
        r.timed_out = true;
        term_sent = true;
        term_at = now;
        ::kill(-cmd, SIGTERM);  // the recorder writes its file as interrupted
      }
      const bool term_expired = term_sent && std::chrono::duration<double>(now - term_at).count() > 10;
      const bool interrupt_expired =
          interrupted_seen && std::chrono::duration<double>(now - interrupted_at).count() > 10;
      if ((term_expired || interrupt_expired) && !kill_sent) {
        kill_sent = true;
        ::kill(-cmd, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int status = 0;
  const bool reported = read_all(report[0], &status, sizeof status);
  ::close(report[0]);
  r.interrupted_by = g_interrupted;
  restore();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!reported) {  // the keeper itself was killed (its exit status says how), or could not start the command
    r.started = cmd > 0;
    r.signal = WIFSIGNALED(keeper_status) ? WTERMSIG(keeper_status) : SIGKILL;
    return r;
  }
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    r.started = r.exit_code != 127;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace ampcheck::io
