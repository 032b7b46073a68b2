// Provenance of result and reference files: what ran, where, with which versions, when.
#pragma once

#include "scenario/scenario.h"

#include <c10/core/Device.h>

#include <map>
#include <string>

namespace ampcheck::run {

// Provenance attributes for result and reference files.
std::map<std::string, std::string> provenance(const scenario::Scenario& sc, const at::Device& device);
std::string utc_now();  // ISO 8601, e.g. 2026-12-03T09:40:00Z

}  // namespace ampcheck::run
