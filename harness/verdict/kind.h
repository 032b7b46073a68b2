// The verdict's words, spelled in one place: Kind and its word (verdict.h says what each verdict means).
// A verdict stays a string where it is stored and written — Verdict::verdict, SignalComparison::verdict,
// Expectation::verdict, report::ScenarioSummary::verdict (summary.json, junit.xml, summary.md, report.html, the
// result file's attributes) — since a report row's verdict may be a word that is no verdict (kNoVerdict, validate's
// bitwise verdicts, a sweep run's outcome); code writes and compares the verdicts' words through to_string and is.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampcheck::verdict {

enum class Kind { Tracks, Diverges, Stalls, NonFinite, Error };

const std::string& to_string(Kind k);                   // tracks | diverges | stalls | nonfinite | error
std::optional<Kind> parse_kind(std::string_view word);  // the Kind a word spells; nullopt: no verdict's word
bool is(std::string_view verdict, Kind k);              // verdict is k's word
const std::vector<std::string>& kind_words();  // every verdict's word in Kind's order: expect.verdict's, --expect's

// A report row's verdict where nothing was judged: before the run, a scenario that could not run, a sweep run that
// was not judged.
inline constexpr const char* kNoVerdict = "-";

}  // namespace ampcheck::verdict
