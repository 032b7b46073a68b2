// Fuzz target: the command line (cli::CommandLine::parse). The input is split at NUL bytes into arguments after the
// program name; nothing runs. Oracle: a parse that succeeds leaves every numeric option given within its bounds and
// finite, and --tolerance values that parse_tolerance_overrides accepts; a parse that fails exits 2 with a message.
#include "cli/app.h"
#include "fuzz_support.h"

#include <cmath>
#include <sstream>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"ampcheck"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 24; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty() && args.size() < 24) args.push_back(cur);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  ampcheck::cli::CommandLine cl;
  std::ostringstream out, err;
  const int rc = cl.parse(static_cast<int>(argv.size()), argv.data(), out, err);
  if (rc >= 0) {
    FUZZ_CHECK(rc == 0 || rc == 2, "a refused command line exits 2 (0 after --help)");
    FUZZ_CHECK(rc == 0 || !err.str().empty(), "a refused command line says why");
    return 0;
  }
  for (const auto& n : cl.numeric_values()) {
    if (!n.set) continue;
    FUZZ_CHECK(std::isfinite(n.value) && n.value >= n.min && n.value <= n.max, n.name.c_str());
  }
  if (cl.subcommand() == "judge")
    ampcheck::cli::parse_tolerance_overrides(cl.judge_args().run.tolerance);  // must not throw
  return 0;
}
