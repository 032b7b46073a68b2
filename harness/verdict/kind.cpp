// The verdict's words (kind.h).
#include "verdict/kind.h"

namespace ampcheck::verdict {

const std::vector<std::string>& kind_words() {
  static const std::vector<std::string> words{"tracks", "diverges", "stalls", "nonfinite", "error"};
  return words;
}

const std::string& to_string(Kind k) { return kind_words().at(static_cast<size_t>(k)); }

std::optional<Kind> parse_kind(std::string_view word) {
  const auto& words = kind_words();
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] == word) return static_cast<Kind>(i);
  return std::nullopt;
}

bool is(std::string_view verdict, Kind k) { return verdict == to_string(k); }

}  // namespace ampcheck::verdict
