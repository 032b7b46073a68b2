// Provenance of result and reference files: what ran, where, with which versions, when.
#pragma once

#include "scenario/scenario.h"
#include "trajectory/run_attributes.h"

#include <c10/core/Device.h>

#include <string>

namespace ampcheck::run {

// Provenance attributes for result and reference files: the versions, the device, the scenario, the strategy, the
// date and the stack fingerprint (RunAttributes' provenance fields).
trajectory::RunAttributes provenance(const scenario::Scenario& sc, const at::Device& device);
// Its part that no scenario enters: the versions, the device and the date (a run summary's header is this).
trajectory::RunAttributes machine_provenance(const at::Device& device);
std::string utc_now();  // ISO 8601, e.g. 2026-12-03T09:40:00Z

}  // namespace ampcheck::run
