// validate's and the fleet's words, spelled in one place (as verdict/kind.h spells the verdicts): what a replay of a
// differing step found (Replay::kind, FleetFinding::replay, the validation row's `replay`), what a rank found against
// its class's golden (FleetRun::golden_result, FleetSide::golden_result, FleetVote::golden_result) and a rank's
// status in the fleet report (usecases::FleetRankRow::status). The records hold the enums; their JSON — the ranks'
// messages, summary.json — holds the words, written and read through `enum_words` (io/record_json.h), and the report
// prints them through to_string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampcheck::validate {

// A differing step replayed from a checkpoint (validate::replay_step): not replayed (the run ended before the first
// difference, or the replay failed), transient (the replays differ among themselves or reproduce the golden's — or
// the majority's — result, not the run's), persistent (each reproduces the run's result or a third one: software or
// hardware).
enum class ReplayKind { NotReplayed, Transient, Persistent };

const std::string& to_string(ReplayKind k);                          // "" | transient | persistent
std::optional<ReplayKind> parse_replay_kind(std::string_view word);  // nullopt: no replay's word
const std::vector<std::string>& enum_words(ReplayKind);              // every word in ReplayKind's order

// A run against its class's golden: not compared (no golden of the class, or its stack differs), bit for bit
// identical to it, or differing from it.
enum class GoldenResult { NotCompared, Identical, Differs };

const std::string& to_string(GoldenResult r);                            // "" | identical | differs
std::optional<GoldenResult> parse_golden_result(std::string_view word);  // nullopt: no golden result's word
const std::vector<std::string>& enum_words(GoldenResult);                // every word in GoldenResult's order

// A rank over the fleet's repetitions (usecases/fleet_summary.cpp decides it; the first that holds, in this order
// but Lost, which a stopped fleet sets):
//   RunFailed          a run failed on it
//   DiffersFromGolden  it differs from its class's golden (the golden outranks the majority): blamed
//   Outlier            it differs from a majority of kFleetMinMajority ranks or more (no golden)
//   NonFinite          its run went non-finite where another rank's completed: a fault whatever its fingerprint
//   Diverges           its run fails validate's statistical verdict against the FP32 references, or (alone in a
//                      drift group) its loss is off the main stack's beyond kFleetDriftLossTolerance
//   CannotTell         its group split with no golden and no large enough majority: nobody named
//   Agrees             with its group's majority, or cleared by the golden: the one passing status
//   Lost               it died or stopped answering (distributed::RankWatch)
enum class FleetRankStatus { RunFailed, DiffersFromGolden, Outlier, NonFinite, Diverges, CannotTell, Agrees, Lost };

// run failed | differs from its golden | outlier | non-finite | diverges | cannot tell | agrees | lost
const std::string& to_string(FleetRankStatus s);
std::optional<FleetRankStatus> parse_fleet_rank_status(std::string_view word);  // nullopt: no rank status's word
const std::vector<std::string>& enum_words(FleetRankStatus);                    // every word in FleetRankStatus's order

}  // namespace ampcheck::validate
