// Running one scenario end to end: build the trainer on the resolved device, train, classify the outcome, write
// the trajectory file with provenance. Shared by the CLI and the tests.
#pragma once

#include "engine/device.h"
#include "engine/trainer.h"
#include "scenario/scenario.h"

#include <string>

namespace ampcheck::engine {

struct ScenarioResult {
  std::string name;
  std::string device_class;
  RunOutcome outcome;
  Trajectory trajectory;
  std::string model_description;
  double first_loss = NAN, final_loss = NAN, min_loss = NAN;
  double median_step_ms = NAN;      // over steps after the first 10% (warm-up excluded)
  double tokens_per_step = 0;
  int64_t peak_memory_bytes = 0;
  bool expectation_met = false;     // against expect: for error / nonfinite decidable now; tracks etc. need references
  std::string expectation_note;
};

// Runs the scenario. device_spec: auto | cpu | cuda (overrides the scenario's device unless empty).
// steps_override > 0 replaces train.steps.
ScenarioResult run_scenario(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps_override = 0,
                            Trainer::ProgressFn progress = nullptr);

// A progress printer for long runs: on a terminal one line rewritten in place (step, loss, scale, ETA); otherwise a
// plain line every 10% of the steps.
Trainer::ProgressFn terminal_progress(int64_t total_steps);

// Provenance attributes for result and reference files.
std::map<std::string, std::string> provenance(const scenario::Scenario& sc, const at::Device& device);

}  // namespace ampcheck::engine
