// What the recording of a sweep's run shows, the words spelled in one place (as verdict/kind.h spells the verdicts):
// a RecordingCheck's and a SweepRow's outcome (sweep_runs.h, sweep.h), written as the word into sweep.json's
// "outcome", report.html's strategies table, the sweep's log and messages.
#pragma once

#include <string>

namespace ampcheck::usecases {

enum class RecordingOutcome {
  Judged,           // the file holds the planned run's recording (status completed / nonfinite / error)
  Partial,          // stopped at its time limit (status running / interrupted): judged on the steps it has
  Error,            // the command recorded nothing and failed, or its recording cannot be read
  Refused,          // the plan was refused (plan_applied "refused: ..."): a strategy the framework cannot apply
  NotOptedIn,       // the command finished but recorded nothing: it does not read AMPCHECK_PLAN
  IgnoredPlan,      // recorded, but not the planned run, or with another precision than the plan's
  RecordedNothing,  // a recording without steps
};

// judged | partial | error | refused | not-opted-in | ignored-plan | recorded-nothing
const std::string& to_string(RecordingOutcome o);

}  // namespace ampcheck::usecases
