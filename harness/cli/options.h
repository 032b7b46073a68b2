// Each command's options as the command line parses them: one struct per command, filled by that command's add_*
// function in app.cpp and read by that command's branch of CommandLine::run. Defaults here are the commands'
// defaults (those CLI11 sets with default_val are set there, as the help shows them).
#pragma once

#include "cli/commands.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::cli {

// list
struct ListArgs {
  std::string suite;
};

// run, record and check (each its own): what to run, where, how long, and each command's own flags
struct ScenarioArgs {
  RunOptions run;
};

// validate
struct ValidateArgs {
  RunOptions run;  // the scenarios, --out / --force, --references, --strict
  ValidateOptions validate;
};

// compare: two run directories and the regression thresholds
struct CompareArgs {
  std::string run_a, run_b;
  report::CompareThresholds thresholds;
};

// report
struct ReportArgs {
  std::string run_dir;
  bool force = false;
};

// doctor
struct DoctorArgs {
  std::string device = "auto";
  bool json = false;
  DoctorOptions options;
};

// judge: the runs, the reference and how to judge them
struct JudgeArgs {
  std::vector<std::string> runs;
  std::string reference, expect, strategy;
  int64_t first_steps = 0;
  RunOptions run;  // --out / --force, --strict and --tolerance (run.tolerance, KEY=VALUE as given)
};

// reference
struct ReferenceArgs {
  std::string run, out;
  std::vector<std::string> spread;
  bool force = false;
};

// sweep: its options, --strategies as given (one comma-separated argument, split when the sweep runs)
struct SweepArgs {
  usecases::SweepOptions options;
  std::string strategies;
};

// localize
struct LocalizeArgs {
  usecases::LocalizeOptions options;
};

// _rank: one rank of a data-parallel run ampcheck started (distributed/launcher.h)
struct RankArgs {
  std::string scenario, out, device;
  int64_t steps = 0;
};

// _allreduce: one rank of doctor's all-reduce check (distributed/allreduce_check.h)
struct AllreduceArgs {
  std::string backend;
  int64_t bytes = 0, iterations = 0;
  double timeout = 120;
};

}  // namespace ampcheck::cli
