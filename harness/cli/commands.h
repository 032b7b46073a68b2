// The ampcheck subcommands as the command line runs them: each calls its use case (harness/usecases), prints what it
// returns and turns it into an exit code (0 pass, 1 a scenario failed, 2 bad input — thrown —, 77 skipped).
#pragma once

#include "usecases/localize_scenarios.h"
#include "usecases/options.h"
#include "usecases/sweep.h"
#include "usecases/usecases.h"

#include <string>
#include <vector>

namespace ampcheck::cli {

using usecases::DoctorOptions;
using usecases::JudgeInputs;
using usecases::ReferenceInputs;
using usecases::RunOptions;
using usecases::ValidateOptions;

int cmd_list(const std::string& suite);
int cmd_run(const RunOptions& opts);      // train, write trajectories, judge error/nonfinite expectations only
int cmd_record(const RunOptions& opts);   // (re)write FP32 references for this device class
int cmd_check(const RunOptions& opts);    // run + compare with references: verdicts, PASS/FAIL, exit 1 on FAIL
int cmd_default(const RunOptions& opts);  // check the default suite on the best device
int cmd_validate(const RunOptions& opts, const ValidateOptions& v);
int cmd_compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t);
int cmd_report(const std::string& run_dir, bool force);  // report.html from summary.json + trajectories
int cmd_doctor(const std::string& device, bool json, const DoctorOptions& options = {});  // exit 1: a check failed
int cmd_reference(const ReferenceInputs& in);
int cmd_judge(const JudgeInputs& in, const RunOptions& opts);  // opts: out_dir, force, strict
int cmd_sweep(const usecases::SweepOptions& o);                // the strategy table for the user's own command
int cmd_localize(const usecases::LocalizeOptions& o);          // the modules to keep in FP32, per failing scenario

// The result table of check, validate and judge (tables.cpp): one row per scenario, then its warnings and engine
// path, printable (io/text.h: names and messages may quote a file's text).
void print_result_table(const report::RunSummary& summary);
// The sweep's table: one row per strategy against the FP32 reference, what failed and why, the recommendation.
void print_sweep_table(const usecases::SweepResult& r);
// localize's table: one row per scenario — its verdict, the modules to keep in FP32 (or none), the probe runs against
// their bound, what keeping them costs; then each scenario's localization in words.
void print_localize_table(const usecases::LocalizeResult& r);

}  // namespace ampcheck::cli
