// `ampcheck validate --fleet`: every rank of a torchrun / srun job runs the validation suite with the same seeds on
// its own device, and the ranks vote. Identical seeds on identical stacks must give identical bits, so within a group
// of ranks with the same stack fingerprint the majority's trajectory is a golden for free; a rank that differs from
// it is an outlier (named, then replayed on that rank to class it transient / persistent). Ranks whose fingerprints
// differ in a key that can change bits (validate::changes_bits) form separate groups: configuration drift, nobody
// called corrupt. This header is the data each rank sends (records with `visit_fields`: the wire format and
// summary.json derive from them) and the vote — pure functions every rank computes alike from the gathered records,
// so every rank knows, without another message, who replays what. The exchange is usecases/validate_fleet.cpp's.
#pragma once

#include "trajectory/run_status.h"
#include "trajectory/trajectory.h"
#include "validate/fleet_status.h"
#include "validate/validate.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::validate {

// ---- what a rank sends

struct FleetKeyValue {
  std::string key, value;
};
template <class V>
void visit_fields(FleetKeyValue& r, V& v) {
  v.required("key", r.key);
  v.required("value", r.value);
}

// Where a rank runs and what was aimed at it: what its identity and its row in the fleet report share.
struct FleetRankPlace {
  int64_t rank = 0, local_rank = 0;
  std::string host;         // gethostname
  std::string device;       // "cpu", "cuda:3"
  std::string device_name;  // "NVIDIA H100 80GB HBM3", or the CPU model
  std::string gpu_uuid;     // "GPU-8f6c..." where the driver gives it, else ""
  std::string pci_bus;      // "0000:19:00.0" where the driver gives it, else ""
  std::string cpu_model;
  std::string golden_class;  // validate::golden_class of its fingerprint
  std::string plants;        // the plants aimed at this rank (--plant-rank), as given
};
template <class V>
void visit_place_fields(FleetRankPlace& r, V& v) {
  v.required("rank", r.rank);
  v("local_rank", r.local_rank);
  v("host", r.host);
  v("device", r.device);
  v("device_name", r.device_name);
  v("gpu_uuid", r.gpu_uuid);
  v("pci_bus", r.pci_bus);
  v("cpu_model", r.cpu_model);
  v("golden_class", r.golden_class);
  v("plants", r.plants);
}

// Who a rank is, sent once (before anything trains): where it runs, its stack, what it is about to run, and whether
// it could prepare.
struct FleetRankIdentity : FleetRankPlace {
  int64_t world_size = 1;
  std::vector<FleetKeyValue> fingerprint;  // engine::stack_fingerprint of its device
  // the options that must agree on every rank (--steps, --repeat, ...: fleet_options_of in validate_fleet.cpp)
  std::vector<FleetKeyValue> options;
  std::vector<FleetKeyValue> scenarios;  // key: the scenario's name, value: golden_config_hash of its run as it trains
  std::string error;                     // non-empty: bad input on this rank (every rank then exits 2)
};
template <class V>
void visit_fields(FleetRankIdentity& r, V& v) {
  visit_place_fields(r, v);
  v("world_size", r.world_size);
  v("fingerprint", r.fingerprint);
  v("options", r.options);
  v("scenarios", r.scenarios);
  v("error", r.error);
}

// ---- the same input on every rank (fleet_inputs.cpp)

// What differs between the ranks' options and scenarios, one line each, naming the field or the scenario and the
// ranks on each side (the value most ranks hold first): "--steps: 12 on ranks 0,2,3; 30 on rank 1", "scenario
// 'x': only on rank 1 (not on ranks 0,2,3)", "scenario 'y': configuration a1b2... on ranks 0,2,3; c3d4... on rank
// 1". Empty when every rank runs the same scenarios (by name and configuration hash, in any order) with the same
// options. Pure: every rank computes the same lines from the gathered identities.
std::vector<std::string> fleet_input_differences(const std::vector<FleetRankIdentity>& ranks);
// The scenarios whose configuration hash differs between ranks (their names, sorted).
std::vector<std::string> scenarios_configured_apart(const std::vector<FleetRankIdentity>& ranks);
// texts[k]: rank k's canonical configuration text of `scenario` (validate::golden_config_text; "" where it lacks it):
// "scenario 'y': rank 1 differs from rank 0: lr=0.001 -> lr=0.002", one line per rank that differs from the text most
// ranks hold.
std::vector<std::string> configuration_differences(const std::string& scenario, const std::vector<std::string>& texts);

// One scenario's run on one rank in one repetition.
struct FleetRun {
  std::string scenario;
  trajectory::RunStatus status = trajectory::RunStatus::Error;  // completed | nonfinite | error (its words)
  std::string error;                                            // the run's error, if any
  std::string trajectory_hash;  // trajectory_hash: every column compared bitwise and every digest ("" no run)
  int64_t steps = 0;
  std::string golden;                                      // the golden of this rank's class compared with ("" none)
  GoldenResult golden_result = GoldenResult::NotCompared;  // not compared: no golden of the class, or its stack differs
  std::string golden_message;                              // compare_bitwise's message, or why no golden was compared
  // the loss at every step: a rank alone in a drift group is compared with the main stack statistically through it
  std::vector<double> losses;
  bool nonfinite_expected = false;  // the scenario expects its run to go non-finite (a validation scenario: never)
  // validate's statistical verdict against the FP32 references of `reference_class` (this device class's, else the
  // nearest's; "" where the reference root holds none): a run that fails it is a fault whatever its group or vote
  std::string reference_class;
  std::string statistical_verdict;  // tracks | diverges | stalls | nonfinite | error ("" not judged)
  bool statistical_pass = true;     // the pass rule's decision on it against the scenario's expectation
  std::string statistical_message;
};
template <class V>
void visit_fields(FleetRun& r, V& v) {
  v.required("scenario", r.scenario);
  v("status", r.status);
  v("error", r.error);
  v("trajectory_hash", r.trajectory_hash);
  v("steps", r.steps);
  v("golden", r.golden);
  v("golden_result", r.golden_result);
  v("golden_message", r.golden_message);
  v("losses", r.losses);
  v("nonfinite_expected", r.nonfinite_expected);
  v("reference_class", r.reference_class);
  v("statistical_verdict", r.statistical_verdict);
  v("statistical_pass", r.statistical_pass);
  v("statistical_message", r.statistical_message);
}
struct FleetRuns {  // one rank's repetition, as one message
  int64_t rank = 0;
  std::vector<FleetRun> runs;
};
template <class V>
void visit_fields(FleetRuns& r, V& v) {
  v.required("rank", r.rank);
  v.required("runs", r.runs);
}

// An outlier's finding, computed on the outlier against the majority's trajectory (broadcast from the group's
// representative) or, where its group compared goldens, against its own copy of the golden; then gathered.
struct FleetFinding {
  int64_t rank = 0, repetition = 0, majority_rank = -1;  // majority_rank -1: compared with the golden
  std::string against;                                   // "the majority (rank 0)" | "the cpu-avx512 golden"
  std::string scenario;
  int64_t first_step = -1;
  std::string column, tensor;                   // the first differing column / tensor at that step ("" none)
  std::string difference;                       // compare_bitwise's message against the majority
  ReplayKind replay = ReplayKind::NotReplayed;  // not replayed: the run did not complete, or the replay failed
  std::string replay_message;
};
template <class V>
void visit_fields(FleetFinding& r, V& v) {
  v.required("rank", r.rank);
  v("repetition", r.repetition);
  v("majority_rank", r.majority_rank);
  v("against", r.against);
  v.required("scenario", r.scenario);
  v("first_step", r.first_step);
  v("column", r.column);
  v("tensor", r.tensor);
  v("difference", r.difference);
  v("replay", r.replay);
  v("replay_message", r.replay_message);
}
struct FleetFindings {
  int64_t rank = 0;
  double elapsed_s = 0;  // since the fleet started, at the end of the repetition (rank 0's decides --duration)
  std::vector<FleetFinding> findings;
};
template <class V>
void visit_fields(FleetFindings& r, V& v) {
  v.required("rank", r.rank);
  v("elapsed_s", r.elapsed_s);
  v("findings", r.findings);
}

// The majority's trajectory as its representative broadcasts it to the outliers: the rows and the digests, in
// binary (little-endian host order: the ranks of one job share it). decode throws std::runtime_error on a message
// that is not one (truncated, or sizes past its length).
std::string encode_trajectory(const trajectory::Trajectory& t);
trajectory::Trajectory decode_trajectory(const std::string& bytes);

// ---- planted faults per rank

// --plant-rank R[/K]:<plant>: validate's --plant grammar (parse_plant) on rank R only, in every repetition or in
// repetition K only (1-based). Throws std::invalid_argument naming the text and what was expected.
struct RankPlant {
  int64_t rank = 0;
  int64_t repetition = 0;  // 0: every repetition
  Plant plant;
};
RankPlant parse_plant_rank(const std::string& text);

// "0,2,3": ranks as the reports list them.
std::string rank_list(const std::vector<int64_t>& ranks);

// ---- the vote

// FNV-1a 64 over what compare_bitwise compares: the length, every column but the step time (bits), the digests'
// tensor names and values. Equal hashes <=> compare_bitwise finds the trajectories identical (up to a 2^-64 collision).
std::string trajectory_hash(const trajectory::Trajectory& t);

// Ranks with the same values of every fingerprint key that can change bits (changes_bits) form one group; groups in
// order of size (largest first), ties by their lowest rank. The largest is the fleet's main stack; every other group
// is configuration drift from it, with the keys that differ.
struct FleetGroup {
  int64_t id = 0;
  std::vector<int64_t> ranks;
  std::string golden_class;
  std::vector<FleetKeyValue> drift;       // keys (that change bits) whose value differs from the main group's
  std::vector<std::string> varying_keys;  // keys that do not change bits and differ between its ranks (drivers)
  std::string drift_description;          // "aten_cpu_capability: AVX512 -> AVX2" ("" for the main group)
};
std::vector<FleetGroup> group_by_fingerprint(const std::vector<FleetRankIdentity>& ranks);

// Without a golden, the vote names outliers only where its majority holds at least this many ranks: a majority of
// two (2 vs 1) is as likely a pair carrying the same fault as a healthy pair (issue 52: two ranks with the same bit
// flip out-voted a healthy one), so below it the fleet says it cannot tell which side is wrong. Chosen on the fleet
// blame campaign's tuning draw (docs/VALIDATE.md, "Fleet blame campaign").
constexpr int64_t kFleetMinMajority = 3;
// A rank alone in a drift group has no peer of its stack: it is compared with the main stack's reference run
// statistically, by its loss at every step. Beyond this relative difference at any step it diverges — a fault
// whatever its fingerprint (as a non-finite run is). Configuration drift moves this MLP's loss by ~1e-7 relative;
// chosen on the campaign's tuning draw (docs/VALIDATE.md, "Fleet blame campaign"; docs/TOLERANCE.md).
constexpr double kFleetDriftLossTolerance = 1e-3;

// The ranks of a group that hold one trajectory hash in a vote, and what they found against their golden.
struct FleetSide {
  std::string hash;
  std::vector<int64_t> ranks;
  GoldenResult golden_result = GoldenResult::NotCompared;
};
template <class V>
void visit_fields(FleetSide& r, V& v) {
  v("hash", r.hash);
  v("ranks", r.ranks);
  v("golden_result", r.golden_result);
}

// One group's vote on one scenario in one repetition. Goldens outrank the majority: where the group's ranks compared
// a golden, a rank identical to it is cleared and every rank that differs from it is an outlier (compared with the
// golden on its own rank), whatever the majority holds. Without a golden the majority decides only where it holds
// kFleetMinMajority ranks or more; below that (2 vs 1, 2 vs 2, no majority) nobody is named: `cannot_tell`.
struct FleetVote {
  int64_t repetition = 0;  // 1-based (set by the caller: summary.json's `votes`)
  int64_t group = 0;
  std::string scenario;
  std::string majority_hash;                // held by more than half the group's ranks ("" no majority)
  int64_t majority_rank = -1;               // the lowest rank holding it: the representative broadcast to outliers
  std::vector<int64_t> majority, outliers;  // outliers: the group's ranks blamed (against the golden or the majority)
  std::vector<int64_t> cleared;             // ranks identical to the golden
  bool no_majority = false;                 // two or more ranks and no hash held by more than half
  bool cannot_tell = false;                 // ranks differ and neither a golden nor a large enough majority decides
  bool against_golden = false;              // outliers were decided by the golden (compared with it, not broadcast)
  std::vector<FleetSide> sides;             // every hash and its ranks, largest first
  // the reference side's comparison with its class's golden
  GoldenResult golden_result = GoldenResult::NotCompared;
  std::string golden_message, golden;
};
template <class V>
void visit_fields(FleetVote& r, V& v) {
  v("repetition", r.repetition);
  v("group", r.group);
  v.required("scenario", r.scenario);
  v("majority_rank", r.majority_rank);
  v("majority", r.majority);
  v("outliers", r.outliers);
  v("cleared", r.cleared);
  v("no_majority", r.no_majority);
  v("cannot_tell", r.cannot_tell);
  v("against_golden", r.against_golden);
  v("sides", r.sides);
  v("golden_result", r.golden_result);
}
// runs[k]: rank k's runs of this repetition. Runs are paired by scenario name (the order on a rank is its own); the
// scenarios voted on are runs[0]'s; a rank without a run of that name holds no hash in its vote.
std::vector<FleetVote> vote(const std::vector<FleetGroup>& groups, const std::vector<FleetRuns>& runs);

// The votes whose outliers are compared and replayed (a golden or a large enough majority named them), in the order
// every rank walks them.
std::vector<const FleetVote*> votes_to_settle(const std::vector<FleetVote>& votes);

}  // namespace ampcheck::validate
