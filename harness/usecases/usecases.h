// The use cases: what each command does, as functions that take parsed inputs (options.h) and return results. The
// command line (harness/cli) parses, calls one of these, prints what it returns and turns it into an exit code; new
// commands land here. Progress lines ("[1/3] name (strategy)", "recording ...") go to `log`; results are returned.
// Bad input throws (std::invalid_argument / std::runtime_error naming the file, the field and what was expected)
// before anything trains or is written.
#pragma once

#include "usecases/options.h"

#include "report/compare.h"
#include "report/summary.h"
#include "run/scenario_run.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// What check, validate and judge return: the run summary (one row per scenario / run, its verdict and PASS / FAIL)
// and where its run directory was published.
struct SuiteResult {
  std::string skipped;  // non-empty: nothing ran, and why (no CUDA device, too few GPUs): exit 77
  bool written = true;  // false on a joined rank other than 0 of a torchrun / srun job: rank 0 judges and writes
  report::RunSummary summary;
  std::string reports_dir;         // the published run directory
  std::vector<std::string> notes;  // one line per scenario that the command adds below the table (validate's words)
  int exit_code() const;           // 77 skipped, 0 all passed (or not written here), else 1
};

// check: every scenario run and judged against its FP32 reference (judge_run.h), in this process or `jobs` at once.
SuiteResult check(const RunOptions& opts, std::ostream& log);
// The default job: check of the gpu suite on a GPU, else the ci suite on the CPU.
SuiteResult check_default(RunOptions opts, std::ostream& log);

// validate: the validation suite against its goldens, bit for bit where the stack matches (validate_stack.cpp);
// with v.record, this stack's goldens written instead (nothing judged, no run directory: written is false).
SuiteResult validate_stack(RunOptions opts, const ValidateOptions& v, std::ostream& log);
// validate --fleet: this process is one rank of a torchrun / srun job; every rank runs the suite on its own device,
// the ranks vote within groups of one stack fingerprint, outliers are named and replayed on their rank; rank 0
// writes the fleet report (summary.json, summary.md, junit.xml, report.html) into --out. Every rank returns the same
// verdict (each computes the vote from the same gathered records). Bad input on any rank: every rank throws, naming it.
struct FleetResult {
  bool written = false;  // rank 0: the report was published
  std::string reports_dir;
  std::vector<std::string> lines;  // what the command prints: groups, drift, outliers, the verdict
  bool pass = false;               // every rank agrees with its group's majority and the group with its goldens
  int exit_code() const { return pass ? 0 : 1; }
};
FleetResult validate_fleet(RunOptions opts, const ValidateOptions& v, std::ostream& log);
// validate --seal: the seal (validate/golden.h) added to goldens recorded before it existed, from their own content.
void seal_goldens(const std::vector<std::string>& paths, std::ostream& log);

// judge: external runs against a reference built from the user's FP32 runs (judge_runs.cpp, judge_run.cpp).
SuiteResult judge_runs(const JudgeInputs& in, const RunOptions& opts, std::ostream& log);

// reference: a reference from the user's FP32 run and spread runs, written to in.out.
struct ReferenceResult {
  std::string path;
  int64_t steps = 0;
  std::vector<std::string> noise_labels;
};
ReferenceResult make_reference(const ReferenceInputs& in);

// record: the FP32 references of the scenarios named, for this device class.
struct RecordResult {
  int recorded = 0, kept = 0;
};
RecordResult record_references(const RunOptions& opts, std::ostream& log);

// run: train the scenarios, write their trajectories; no verdict (a run's status against its expectation only).
// One scenario run: what the engine did, and its status against the plan's expectation of it (verdict::decide on
// the status alone: a completed run meets every verdict a reference decides).
struct ScenarioRun {
  run::ScenarioResult result;
  bool expectation_met = false;
  std::string expectation_note;  // the decision's message ("completed; 'tracks' is judged against the FP32 reference")
};
struct RunResult {
  std::string skipped;
  bool written = true;
  std::vector<ScenarioRun> results;
  int failures() const;
};
// The `run` command's use case (run_command.cpp).
RunResult run_command(const RunOptions& opts, std::ostream& log);

// report: report.html and summary.md again from a run directory's summary.json; returns the paths written.
std::vector<std::string> rewrite_reports(const std::string& run_dir, bool force);

// list: the scenarios of a suite (name, why), or the strategies and suites.
struct Listing {
  std::vector<std::pair<std::string, std::string>> scenarios;   // suite given: name, why
  std::vector<std::pair<std::string, std::string>> strategies;  // else: preset name, description
  std::vector<std::string> suites;
};
Listing list(const std::string& suite);

// compare: two run directories' summaries, scenario by scenario (report/compare.h).
struct Comparison {
  std::string text;  // the comparison table
  bool regressed = false;
};
Comparison compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t);

// doctor: the device, versions and support, the smoke test and the all-reduce check (doctor/doctor.h).
struct DoctorResult {
  std::string json, text;  // the report as JSON, and as the terminal table
  bool ok = false;         // the smoke test and the all-reduce check passed
};
DoctorResult doctor(const std::string& device, const DoctorOptions& options);

}  // namespace ampcheck::usecases
