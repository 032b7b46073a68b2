// The trajectory read in a child process (trajectory_file.h read_trajectory_contained): a malformed file's crash or
// hang ends the child, not the command; the child writes what it read to a fresh file the parent then reads.
#include "trajectory/trajectory_file.h"

#include "io/text.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

// Under a sanitizer (AddressSanitizer's shadow memory, ThreadSanitizer's allocator are mapped data) the reading child
// keeps the data limit it has.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AMPCHECK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define AMPCHECK_SANITIZED 1
#endif
#endif

namespace ampcheck::trajectory {

// The reading child's data limit (RLIMIT_DATA): LibTorch's own mappings plus any file a trajectory can be.
constexpr rlim_t kReadMemoryBytes = rlim_t{16} << 30;

TrajectoryFile read_trajectory_contained(const std::string& path, Columns required, int timeout_s) {
  if (const char* env =
          std::getenv("AMPCHECK_READ_TIMEOUT_S")) {  // tests: a hostile file's hang in seconds, not a minute
    const int t = std::atoi(env);
    if (t > 0) timeout_s = t;
  }
  char tmpl[] = "/tmp/ampcheck-read-XXXXXX";
  const int tmp_fd = ::mkstemp(tmpl);
  if (tmp_fd < 0)
    throw std::runtime_error(path + ": cannot make a temporary file to read it safely (" + std::strerror(errno) + ")");
  ::close(tmp_fd);
  const std::string tmp = tmpl;
  int fds[2];
  if (::pipe(fds) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": pipe failed (" + std::string(std::strerror(errno)) + ")");
  }
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": fork failed (" + std::string(std::strerror(errno)) + ")");
  }
  if (pid == 0) {  // the child: read, re-write, report an error's text through the pipe; _exit, no handlers
    // dies with the parent (a killed command leaves no reader behind); a parent gone before the prctl: re-parented
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(5);
    ::close(fds[0]);
    // the default actions: a crash in libhdf5 ends the child by its signal, which the parent reports; no handler
    // inherited (a sanitizer's, libFuzzer's, Python's) turns it into an exit code or an artifact of its own
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::signal(sig, SIG_DFL);
    ::alarm(static_cast<unsigned>(timeout_s));
    // bounded memory: a hostile file's huge allocation fails (std::bad_alloc, an error) instead of taking the machine
#if !defined(AMPCHECK_SANITIZED)
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_DATA, &lim) == 0 && (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > kReadMemoryBytes)) {
      lim.rlim_cur = kReadMemoryBytes;
      ::setrlimit(RLIMIT_DATA, &lim);
    }
#endif
    try {
      TrajectoryFile f = read_trajectory(path, required);
      std::string present;
      for (const auto& c : f.columns_present) present += c + "\n";
      f.attributes.other["ampcheck_columns_present"] = present;  // the copy holds every column; which were in the file
      write_trajectory(tmp, f, /*overwrite=*/true);
      ::_exit(0);
    } catch (const std::exception& e) {
      const std::string m = e.what();
      ssize_t unused = ::write(fds[1], m.data(), m.size());
      (void)unused;
      ::_exit(3);
    } catch (...) {
      ::_exit(4);
    }
  }
  ::close(fds[1]);
  std::string message;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto fail = [&](const std::string& why) {
    std::remove(tmp.c_str());
    throw std::runtime_error(why);
  };
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGALRM)
      fail(path + ": reading it took longer than " + std::to_string(timeout_s) +
           " s; the file is corrupt or hostile. "
           "HINT: re-record it");
    fail(path + ": the HDF5 library crashed reading it (signal " + std::to_string(sig) + ", " + strsignal(sig) +
         "): the file is corrupt. HINT: re-record it");
  }
  message = io::printable_text(message);  // the child's error may quote the file's bytes
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(message.empty() ? path + ": could not be read (the reader ended with status " + std::to_string(status) + ")"
         : message.find(path) == std::string::npos ? path + ": " + message  // e.g. std::bad_alloc
                                                   : message);
  TrajectoryFile f;
  try {
    f = read_trajectory(tmp, Columns::AllRequired);
  } catch (const std::exception& e) {
    fail(path + ": " + e.what());
  }
  std::remove(tmp.c_str());
  f.columns_present.clear();
  std::string present = f.attributes.other["ampcheck_columns_present"];
  for (size_t pos; (pos = present.find('\n')) != std::string::npos; present.erase(0, pos + 1))
    f.columns_present.push_back(present.substr(0, pos));
  f.attributes.other.erase("ampcheck_columns_present");
  return f;
}

}  // namespace ampcheck::trajectory
