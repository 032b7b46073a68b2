// The pass rule (pass_rule.h).
#include "verdict/pass_rule.h"

#include "trajectory/run_status.h"

#include <algorithm>

namespace ampcheck::verdict {

Observation observe(const Verdict& v, const std::string& run_error) {
  Observation o;
  o.verdict = v.verdict;
  o.message = v.message;
  o.error = run_error;
  o.skipped_steps = v.skipped_steps;
  o.warnings = v.warnings;
  return o;
}

Observation observe_status(const std::string& status, const std::string& run_error) {
  Observation o;
  o.judged = false;
  o.verdict = status;
  o.error = run_error;
  return o;
}

namespace {

// verdicts only a reference decides: what a completed run without one may still turn out to be
bool needs_reference(const std::string& verdict) { return !is(verdict, Kind::Error) && !is(verdict, Kind::NonFinite); }

// A run without a reference: a note on its status (`run_status`, the status word observed.verdict read once by
// decide), whether it passed or not.
std::string status_note(const Expectation& expected, const Observation& observed,
                        std::optional<trajectory::RunStatus> run_status) {
  const std::string& status = observed.verdict;  // the run's status word (trajectory/run_status.h)
  if (is(expected.verdict, Kind::Error))
    return run_status == trajectory::RunStatus::Error ? "raised: " + observed.error : "expected an error, none raised";
  if (is(expected.verdict, Kind::NonFinite))
    return run_status == trajectory::RunStatus::NonFinite ? "non-finite as expected" : "run " + status;
  return run_status == trajectory::RunStatus::Completed
             ? "completed; '" + expected.verdict + "' is judged against the FP32 reference"
             : "run ended " + status + (observed.error.empty() ? "" : ": " + observed.error);
}

// What the warnings say against the expectation ("" if nothing): expected ones missing, and under strict the others.
std::string warnings_unmet(const Expectation& expected, const Observation& observed, bool strict) {
  const auto raised = [&](const std::string& signal) {
    return std::any_of(observed.warnings.begin(), observed.warnings.end(),
                       [&](const Warning& w) { return w.signal == signal; });
  };
  std::string why;
  for (const auto& e : expected.warnings)
    if (!raised(e)) why += (why.empty() ? "" : "; ") + ("expected a " + e + " warning, none was raised");
  if (strict)
    for (const auto& w : observed.warnings)
      if (std::find(expected.warnings.begin(), expected.warnings.end(), w.signal) == expected.warnings.end())
        why += (why.empty() ? "" : "; ") + ("--strict: warning " + w.signal + ": " + w.message);
  return why;
}

}  // namespace

Decision decide(const Expectation& expected, const Observation& observed, bool strict) {
  Decision d;
  const bool error_met = !is(expected.verdict, Kind::Error) || !expected.error || observed.error == *expected.error;
  if (!observed.judged) {  // no reference: the verdict is the run's status word
    const auto run_status = trajectory::parse_run_status(observed.verdict);
    const bool verdict_met = observed.verdict == expected.verdict ||
                             (run_status == trajectory::RunStatus::Completed && needs_reference(expected.verdict));
    d.pass = verdict_met && error_met;
    d.message = status_note(expected, observed, run_status);
    return d;
  }
  const bool verdict_met = observed.verdict == expected.verdict;
  const int64_t skipped = observed.skipped_steps;
  const bool skipped_met = (expected.skipped_min < 0 || skipped >= expected.skipped_min) &&
                           (expected.skipped_max < 0 || skipped <= expected.skipped_max);
  d.verdict_message = observed.message;
  if (!skipped_met)
    d.verdict_message += "; " + std::to_string(skipped) + " skipped steps, expected " +
                         std::to_string(expected.skipped_min) + ".." + std::to_string(expected.skipped_max);
  d.pass = verdict_met && error_met && skipped_met;
  d.message = d.pass ? d.verdict_message
                     : "expected " + expected.verdict +
                           (expected.error && !expected.error->empty() ? " ('" + *expected.error + "')" : "") +
                           ", got " + observed.verdict + ": " + d.verdict_message;
  const std::string why = warnings_unmet(expected, observed, strict);
  if (why.empty() || is(observed.verdict, Kind::Error)) return d;  // an error's warnings decide nothing
  d.message = d.pass ? why + " (verdict " + observed.verdict + ": " + d.verdict_message + ")" : d.message + "; " + why;
  d.pass = false;
  return d;
}

}  // namespace ampcheck::verdict
