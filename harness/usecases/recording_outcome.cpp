// What the recording of a sweep's run shows: the outcome words (recording_outcome.h).
#include "usecases/recording_outcome.h"

#include <vector>

namespace ampcheck::usecases {

const std::string& to_string(RecordingOutcome o) {
  static const std::vector<std::string> words{"judged",       "partial",      "error",           "refused",
                                              "not-opted-in", "ignored-plan", "recorded-nothing"};
  return words.at(static_cast<size_t>(o));
}

}  // namespace ampcheck::usecases
