// Provenance of result and reference files: what ran, where, with which versions, when; and a scenario's result file,
// its provenance with how the run ended.
#pragma once

#include "run/scenario_run.h"
#include "scenario/scenario.h"
#include "trajectory/run_attributes.h"
#include "trajectory/trajectory_file.h"

#include <c10/core/Device.h>

#include <string>

namespace ampcheck::run {

// Provenance attributes for result and reference files: the versions, the device, the scenario, the strategy, the
// date and the stack fingerprint (RunAttributes' provenance fields).
trajectory::RunAttributes provenance(const scenario::Scenario& sc, const at::Device& device);
// Its part that no scenario enters: the versions, the device and the date (a run summary's header is this).
trajectory::RunAttributes machine_provenance(const at::Device& device);
std::string utc_now();

// A scenario's result file: its provenance on `device`, how the run ended (status, error, engine path, where it first
// went non-finite) and its trajectory. check and localize add the verdict, validate's goldens their seal; the run
// directory writes it (usecases/run_directory.h write_result).
trajectory::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                       const ScenarioResult& r);  // ISO 8601, e.g. 2026-12-03T09:40:00Z

}  // namespace ampcheck::run
