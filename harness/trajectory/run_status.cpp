// How a run ended: the status words (run_status.h).
#include "trajectory/run_status.h"

namespace ampcheck::trajectory {

const std::vector<std::string>& run_status_words() {
  static const std::vector<std::string> words{"completed", "nonfinite", "error", "running", "interrupted"};
  return words;
}

const std::string& to_string(RunStatus s) { return run_status_words().at(static_cast<size_t>(s)); }

std::optional<RunStatus> parse_run_status(std::string_view word) {
  const auto& words = run_status_words();
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] == word) return static_cast<RunStatus>(i);
  return std::nullopt;
}

}  // namespace ampcheck::trajectory
