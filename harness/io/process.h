// A command run as a child process with a time limit: its own process group (so a timeout stops everything it started),
// extra environment variables, its output into a log file, and death with this process (PR_SET_PDEATHSIG on the
// child it starts). Used by `ampcheck sweep` to run a user's training command once per run.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ampcheck::io {

struct ProcessResult {
  int exit_code = -1;            // the child's exit status; -1 when it ended by a signal
  int signal = 0;                // the signal that ended it (0: none)
  bool timed_out = false;        // stopped by the time limit (SIGTERM to its group, SIGKILL 10 s later)
  bool started = true;           // false: the command could not be executed (its log says why)
  double seconds = 0;            // wall-clock time
  std::string describe() const;  // "exit 0", "exit 3", "killed by signal 9", "stopped after the 600 s limit", ...
};

// Runs argv (argv[0] looked up on PATH) in `cwd` ("" = this process's), with `env` added to this process's
// environment, stdout and stderr appended to `log_path`; waits at most timeout_s seconds (<= 0: no limit).
ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& log_path, double timeout_s);

}  // namespace ampcheck::io
