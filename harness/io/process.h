// A command run as a child process with a time limit: its own process group (so a timeout stops everything it started),
// extra environment variables, its output into a log file, signals forwarded to it and death with this process. Used
// by `ampcheck sweep` to run a user's training command once per run.
//
// The command runs under a small keeper (a forked copy of this process that execs nothing): this process -> keeper ->
// command. The keeper is a child subreaper (PR_SET_CHILD_SUBREAPER): what the command starts and leaves behind — the
// training under a wrapper such as `sh -c`, `bash train.sh` or `make` — is re-parented to it, not to init. When the
// command ends, the keeper kills what is left (its process group, then every process re-parented to it) and reaps
// it. When this process dies, even by SIGKILL, the keeper sees it (its parent changes), sends SIGTERM to the command's
// group (the recorder writes its file as `interrupted`), SIGKILL 10 s later, and ends. SIGINT, SIGTERM and SIGHUP that
// this process receives while the command runs are forwarded to the command's group (a second one sends SIGKILL);
// run_process then returns with `interrupted_by` set, once the command has ended.
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
  int interrupted_by = 0;        // SIGINT / SIGTERM / SIGHUP this process received while it ran (forwarded to it)
  double seconds = 0;            // wall-clock time
  std::string describe() const;  // "exit 0", "exit 3", "killed by signal 9", "stopped after the 600 s limit", ...
};

// Runs argv (argv[0] looked up on PATH) in this process's working directory, with `env` added to this process's
// environment, stdout and stderr appended to `log_path` (opened without following a link); waits at most timeout_s
// seconds (<= 0: no limit). A signal this process ignores (nohup's SIGHUP) stays ignored, for the command too.
ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& log_path, double timeout_s);

// Ends this process by `sig` with its default action (as if it had not been caught): after run_process returned
// interrupted_by, a caller that has said what it stopped ends the way the user asked.
[[noreturn]] void end_by_signal(int sig);

// "SIGINT", "SIGTERM", "SIGHUP", else "signal N".
std::string signal_name(int sig);

}  // namespace ampcheck::io
