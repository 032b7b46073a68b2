// Scenario — one YAML file under scenarios/: a RunConfig (model, data, optimizer, schedule, training loop, strategy,
// injections) plus `why:` (one sentence) and `expect:` (the verdict and, for `error`, the message). Parsing is
// strict: an unknown key, a wrong type or an impossible combination is a ScenarioError naming file:line:column and
// the field path (e.g. "scenarios/x.yaml:7:3: optimizer.lr: expected a number, got 'fast'").
#pragma once

#include "engine/run_config.h"
#include "verdict/pass_rule.h"
#include "verdict/verdict.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace ampcheck::scenario {

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Expect {
  std::string verdict = "tracks";              // tracks | diverges | stalls | nonfinite | error
  std::string error;                           // for `error`: the exact message the engine must raise
  int64_t skipped_min = -1, skipped_max = -1;  // optional bounds on the skipped steps (-1: none)
  // warnings the run must raise (verdict::Warning::signal: zero_grads, subnormal_grads, fp8_saturated, fp8_flushed,
  // not_judged, precision): a planted event whose only trace is a diagnostic. Under --strict, a warning not listed
  // here fails the scenario.
  std::vector<std::string> warnings;
};
// The expectation as the pass rule (verdict/pass_rule.h) takes it: the error message always compared (the parser
// requires one exactly for verdict `error`).
verdict::Expectation expectation(const Expect& e);

struct Scenario {
  std::string path;  // file it came from
  std::string text;  // the file's text (stored in every result file)
  std::string why;
  std::string device = "auto";  // auto | cpu | cuda
  engine::RunConfig run;
  Expect expect;
  verdict::Tolerance tolerance;  // the strategy's default, overridden field by field by `tolerance:`
};

// The longest `name:` in bytes: the name names the scenario's files (<name>.h5, <name>.h5.tmp.<pid>, <name>.ranks),
// which then stay well within the 255 bytes a file name may have.
constexpr size_t kMaxNameBytes = 128;

Scenario load_scenario(const std::string& path);
Scenario parse_scenario(const std::string& text, const std::string& path);  // path only for messages

// Suites: scenarios/suites/<name>.yaml = {why: ..., scenarios: [relative paths]}.
std::vector<std::string> load_suite(const std::string& scenarios_dir, const std::string& suite);

}  // namespace ampcheck::scenario
