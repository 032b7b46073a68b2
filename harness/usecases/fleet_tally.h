// What the fleet's ranks were seen to do over every repetition (fleet_tally.cpp): per rank, per group and every vote,
// the counts and the first sentence of each kind — what fleet_summary.cpp turns into the report's rows and its verdict
// (fleet_report.h summarize_fleet). Pure: every rank tallies the same records alike.
#pragma once

#include "validate/fleet.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// What the group's majorities did against their class's goldens over every vote.
struct GoldenTally {
  int64_t identical = 0, differs = 0, not_compared = 0;
  std::string first_difference, why_not;  // the first "differs" message; why a golden was not compared
};

// What was seen of one rank over the repetitions: counts of repetitions / votes, and the first of each kind said.
struct RankTally {
  int64_t disagreements = 0, failed_runs = 0, blamed = 0, nonfinite = 0, diverged = 0, undecided = 0, cleared = 0,
          planted_reps = 0, unaffected_reps = 0, unmeasured_reps = 0;
  bool golden_blame = false;
  double deviation = -1;  // the largest relative loss difference from the main stack (-1: not compared)
  // runs judged against the FP32 references and those that passed; votes where this rank differed from a failing
  // majority (not blamed: majority_fails)
  int64_t judged = 0, judged_pass = 0, held = 0;
  std::string reference_class, first_statistical_failure, first_held;
  std::string first_error, first_nonfinite, first_divergence, first_undecided;
  std::vector<validate::FleetFinding> findings;
};

// What was seen over every repetition: per rank, per group, and every vote with its repetition.
struct FleetTally {
  std::vector<RankTally> ranks;
  std::map<int64_t, GoldenTally> golden;   // by group
  std::map<int64_t, int64_t> no_majority;  // by group: votes without a majority
  std::vector<validate::FleetVote> votes;  // repetition set, in order
};

// Every repetition tallied: runs[k][r] is rank r's runs of repetition k (0-based), votes[k] and findings[k] likewise;
// the plants aimed at each rank are read from rank 0's identity (its --plant-rank).
FleetTally tally_fleet(const std::vector<validate::FleetRankIdentity>& ids,
                       const std::vector<validate::FleetGroup>& groups,
                       const std::vector<std::vector<validate::FleetVote>>& votes,
                       const std::vector<std::vector<validate::FleetRuns>>& runs,
                       const std::vector<std::vector<validate::FleetFinding>>& findings);

// "1 rank", "3 ranks": a count with its noun.
std::string plural(int64_t n, const std::string& one, const std::string& many);

}  // namespace ampcheck::usecases
