// The ampcheck subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::cli {

struct RunOptions {
  std::vector<std::string> scenarios;
  std::string suite;
  std::string device;  // empty = the scenario's own (default auto)
  std::string out_dir = "reports/latest";
  int64_t steps = 0;
  bool force = false;
};

int cmd_list(const std::string& suite);
int cmd_run(const RunOptions& opts);
int cmd_doctor();
int cmd_default(RunOptions opts);  // default suite on the best device

std::string scenarios_dir();  // $AMPCHECK_SCENARIOS, else <source>/scenarios

}  // namespace ampcheck::cli
