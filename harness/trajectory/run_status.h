// How a run ended, the words spelled in one place (as verdict/kind.h spells the verdicts): the trajectory file's
// `status` attribute (docs/TRAJECTORY_FORMAT.md). An engine run ends completed, nonfinite or error
// (engine::RunOutcome::Status is this type); the Python recorder also writes running (a snapshot of a run still going
// or killed) and interrupted (stopped by SIGTERM), which `judge` judges on the steps they have, as a partial run. The
// attribute stays a string in the file; code reads it with parse_run_status and writes it with to_string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampcheck::trajectory {

enum class RunStatus { Completed, NonFinite, Error, Running, Interrupted };

const std::string& to_string(RunStatus s);  // completed | nonfinite | error | running | interrupted
std::optional<RunStatus> parse_run_status(std::string_view word);  // nullopt: no status's word
const std::vector<std::string>& run_status_words();                // every status's word in RunStatus's order
// the same words for the record codec (io/record_json.h finds a field's enum words by this name)
inline const std::vector<std::string>& enum_words(RunStatus) { return run_status_words(); }

}  // namespace ampcheck::trajectory
