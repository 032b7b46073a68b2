// The pass rule: does what a run did meet what was expected of it? One function, decide(), for `run`, `check` and
// `judge` (harness/cli/). The three differ only in what they know, and that is what they pass in:
//   check  a verdict against the FP32 reference; the scenario's expect: (verdict, the exact error message, bounds on
//          the skipped steps, the warnings it must raise) and --strict
//   judge  a verdict against the user's reference; --expect alone: any error message (Expectation::error unset), no
//          bounds on the skipped steps, no warnings expected; and --strict
//   run    no reference, so no verdict: only the run's status (Observation::judged false). A completed run meets every
//          expectation a reference decides (tracks, diverges, stalls); skipped steps and warnings are check's.
#pragma once

#include "verdict/verdict.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampcheck::verdict {

// What a run is expected to do (a scenario's `expect:`, or judge's --expect).
struct Expectation {
  std::string verdict = to_string(Kind::Tracks);  // kind.h: tracks | diverges | stalls | nonfinite | error
  std::optional<std::string> error;               // verdict error: the exact message the run must raise; unset: any
  int64_t skipped_min = -1, skipped_max = -1;     // bounds on the skipped steps (-1: none)
  std::vector<std::string> warnings;              // Warning::signal of each warning the run must raise
};

// What a run did, as far as it was judged.
struct Observation {
  bool judged = true;   // false: no reference (`run`): verdict is the run's status, nothing else is known
  std::string verdict;  // judged: Verdict::verdict; else completed | nonfinite | error
  std::string message;  // judged: Verdict::message
  std::string error;    // the run's error message (status error)
  int64_t skipped_steps = 0;
  std::vector<Warning> warnings;  // judged: Verdict::warnings
};
Observation observe(const Verdict& v, const std::string& run_error);                  // a verdict (check, judge)
Observation observe_status(const std::string& status, const std::string& run_error);  // a run's status alone (run)

struct Decision {
  bool pass = false;
  // judged: the verdict's message when it passed, else what was expected and what happened ("expected tracks, got
  // diverges: ...", "expected a zero_grads warning, none was raised (verdict tracks: ...)", "--strict: warning ...");
  // not judged: a note on the status ("raised: ...", "completed; 'tracks' is judged against the FP32 reference")
  std::string message;
  // judged: the verdict's message, with "; N skipped steps, expected MIN..MAX" when the skipped steps are outside
  // the expected bounds (what the result file stores as verdict_message); not judged: empty
  std::string verdict_message;
};

// PASS when all of these hold:
//   1. the verdict is the expected one (not judged: a completed run meets every expectation but nonfinite / error);
//   2. an expected error's message, when set, is the run's error message;
//   judged only:
//   3. the skipped steps lie within the expected bounds;
//   4. unless the verdict is error: every expected warning was raised, and under `strict` no other warning was.
// `strict` is ignored for an observation that was not judged.
Decision decide(const Expectation& expected, const Observation& observed, bool strict);

}  // namespace ampcheck::verdict
