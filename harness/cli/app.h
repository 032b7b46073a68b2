// The command line: every subcommand and option, with the bounds of every numeric option. A value outside its range,
// NaN, an infinity or a non-number is refused while parsing (exit 2 and a message naming the option), before
// anything runs. main() parses and runs; harness/fuzz/fuzz_cli.cpp parses only and checks the bounds held.
#pragma once

#include "cli/commands.h"
#include "cli/options.h"
#include "verdict/signals.h"

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ampcheck::cli {

class CommandLine {
 public:
  CommandLine();
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses argv (argv[0] is the program). Returns -1 when a command is to run, else the exit code: 0 after --help,
  // 2 after a parse error (its message written to err).
  int parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
  // Runs the parsed command; an exception's message goes to err, exit 2.
  int run(std::ostream& err);

  // A numeric option as parsed, with its bounds (for harness/fuzz/fuzz_cli.cpp's oracle).
  struct Numeric {
    std::string name;
    double value, min, max;
    bool set;  // given on the command line (else value is its default, which may lie outside [min, max]: a sentinel)
  };
  std::vector<Numeric> numeric_values() const;
  // the parsed subcommand's name ("" for the default command)
  std::string subcommand() const;
  // judge's options as parsed (cli/options.h; fuzz_cli checks its --tolerance values)
  const JudgeArgs& judge_args() const;

  // The parser and every subcommand's options, one struct per command (cli/options.h; app.cpp: one function adds
  // each command's).
  struct State;

 private:
  std::unique_ptr<State> s_;
};

// --tolerance KEY=VALUE overrides of the verdict constants; throws naming the option on a bad one (app.cpp).
verdict::Tolerance parse_tolerance_overrides(const std::vector<std::string>& overrides);

}  // namespace ampcheck::cli
