// validate's and the fleet's words (fleet_status.h).
#include "validate/fleet_status.h"

namespace ampcheck::validate {

namespace {

template <class E>
std::optional<E> parse_word(const std::vector<std::string>& words, std::string_view word) {
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] == word) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& enum_words(ReplayKind) {
  static const std::vector<std::string> words{"", "transient", "persistent"};
  return words;
}

const std::string& to_string(ReplayKind k) { return enum_words(k).at(static_cast<size_t>(k)); }

std::optional<ReplayKind> parse_replay_kind(std::string_view word) {
  return parse_word<ReplayKind>(enum_words(ReplayKind{}), word);
}

const std::vector<std::string>& enum_words(GoldenResult) {
  static const std::vector<std::string> words{"", "identical", "differs"};
  return words;
}

const std::string& to_string(GoldenResult r) { return enum_words(r).at(static_cast<size_t>(r)); }

std::optional<GoldenResult> parse_golden_result(std::string_view word) {
  return parse_word<GoldenResult>(enum_words(GoldenResult{}), word);
}

const std::vector<std::string>& enum_words(FleetRankStatus) {
  static const std::vector<std::string> words{
      "run failed", "differs from its golden", "outlier", "non-finite", "diverges", "cannot tell", "agrees", "lost"};
  return words;
}

const std::string& to_string(FleetRankStatus s) { return enum_words(s).at(static_cast<size_t>(s)); }

std::optional<FleetRankStatus> parse_fleet_rank_status(std::string_view word) {
  return parse_word<FleetRankStatus>(enum_words(FleetRankStatus{}), word);
}

}  // namespace ampcheck::validate
