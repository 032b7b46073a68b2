// One rank's own work in `validate --fleet` (validate_fleet.cpp exchanges it between the ranks): its scenarios
// prepared before anything trains — everything that is bad input on this rank checked —, and its runs of one
// repetition, each compared with its class's golden where one exists and judged against its FP32 references where the
// reference root holds them (validate's statistical verdict).
#pragma once

#include "usecases/options.h"

#include "reference/reference_store.h"
#include "scenario/scenario.h"
#include "trajectory/trajectory.h"
#include "trajectory/trajectory_file.h"
#include "validate/fleet.h"
#include "validate/validate.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// One scenario as the fleet runs it, decided before anything trains.
struct FleetScenario {
  scenario::Scenario sc;
  std::string golden_path;  // this class's golden, where one exists
  trajectory::TrajectoryFile golden;
  std::string golden_skip;  // why no golden is compared ("" if one is)
  // the FP32 references of validate's statistical verdict: this device class's, else the nearest's ("" none)
  std::string reference_class;
  reference::Reference reference;
};

// This rank's plants of repetition `rep` (1-based), from every rank's --plant-rank.
std::vector<validate::Plant> plants_for(const std::vector<validate::RankPlant>& all, int64_t rank, int64_t rep);

// Everything that is bad input, checked on this rank before anything trains (--record, --plant, --replays, a plant
// past the ranks or one that cannot act, a data-parallel scenario, a corrupt golden or FP32 reference, an --out that
// may not be replaced on rank 0); throws naming it. Each scenario with this class's golden and FP32 references
// (`device_class`'s, else the nearest class's).
std::vector<FleetScenario> prepare_rank(const RunOptions& opts, const ValidateOptions& v,
                                        const std::vector<validate::RankPlant>& plants, const validate::Fingerprint& fp,
                                        const std::string& device_class, int64_t rank, int64_t world);

// One repetition's runs on this rank (its plants of the repetition applied); the trajectories kept in `trajectories`
// for the outliers' comparison and the broadcast.
validate::FleetRuns run_repetition(const std::vector<FleetScenario>& scenarios,
                                   const std::vector<validate::Plant>& plants, const at::Device& device, int64_t rank,
                                   std::vector<trajectory::Trajectory>& trajectories);

}  // namespace ampcheck::usecases
