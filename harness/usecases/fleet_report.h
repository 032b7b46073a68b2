// The fleet report of `validate --fleet` (validate_fleet.cpp): one record, FleetSummary — one object per rank and per
// group, the drift, the exchange's traffic — described once by `visit_fields`; summary.json is that record, and
// summary.md, junit.xml (one test case per rank: a scheduler drains the node of a failing case) and report.html
// (tables of ranks, groups, drift, outliers) are derived from it. Rank 0 writes them into a RunDirectory: published
// whole, never over a directory that may not be replaced.
#pragma once

#include "validate/fleet.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// A rank's row: where it runs (validate::FleetRankPlace, from its identity), its group and how it voted.
struct FleetRankRow : validate::FleetRankPlace {
  int64_t group = 0;
  // agrees | differs from its golden | outlier | non-finite | diverges | cannot tell | run failed | lost: what each
  // means, validate/fleet_status.h
  validate::FleetRankStatus status = validate::FleetRankStatus::RunFailed;
  bool pass = false;
  int64_t repetitions = 0;                       // repetitions run
  int64_t disagreements = 0;                     // repetitions in which this rank differed from its group's majority
  std::string rate;                              // "1/5": disagreements / repetitions
  std::vector<validate::FleetFinding> findings;  // each difference from the golden or majority, replayed on this rank
  // the largest relative loss difference from the main stack's reference run, at any step (-1: not compared: the
  // main group itself, or no reference run there)
  double loss_deviation = -1;
  // validate's statistical verdicts on its runs against the FP32 references: "tracks the cpu FP32 references in 3 of
  // 3 runs", "diverges in 1 of 3 runs against the cpu FP32 references (...)"; "" where no run was judged (the
  // reference root holds no FP32 reference of the scenarios)
  std::string statistical;
  std::string message;
};
template <class V>
void visit_fields(FleetRankRow& r, V& v) {
  validate::visit_place_fields(r, v);
  v("group", r.group);
  v.required("status", r.status);
  v.required("pass", r.pass);
  v("repetitions", r.repetitions);
  v("disagreements", r.disagreements);
  v("rate", r.rate);
  v("findings", r.findings);
  v("loss_deviation", r.loss_deviation);
  v("statistical", r.statistical);
  v("message", r.message);
}

struct FleetGroupRow {
  int64_t id = 0;
  std::vector<int64_t> ranks;
  std::vector<std::string> hosts;  // the distinct hosts of its ranks
  std::string golden_class;
  bool main = false;  // the largest group: the fleet's stack; the others are drift from it
  std::string drift;  // "aten_cpu_capability: AVX512 -> AVX2" (empty for the main group)
  std::vector<validate::FleetKeyValue> drift_keys;  // the drifting keys with this group's values
  std::vector<std::string> varying_keys;            // keys that do not change bits and differ inside the group
  std::string goldens;                              // the majority against its class's goldens, in words
  int64_t no_majority = 0;  // votes (scenario x repetition) with no majority: cannot tell who is wrong
  bool pass = false;
  std::string message;
};
template <class V>
void visit_fields(FleetGroupRow& g, V& v) {
  v.required("id", g.id);
  v("ranks", g.ranks);
  v("hosts", g.hosts);
  v("golden_class", g.golden_class);
  v("main", g.main);
  v("drift", g.drift);
  v("drift_keys", g.drift_keys);
  v("varying_keys", g.varying_keys);
  v("goldens", g.goldens);
  v("no_majority", g.no_majority);
  v.required("pass", g.pass);
  v("message", g.message);
}

// What the exchanges cost, as rank 0 counted them (distributed::RankExchange::Traffic) and the messages' sizes.
struct FleetExchange {
  std::string backend;  // gloo | nccl
  int64_t exchanges = 0, bytes_sent = 0, bytes_received = 0;
  int64_t identity_bytes = 0;  // rank 0's identity message (fingerprint included)
  int64_t runs_bytes = 0;      // rank 0's runs message of one repetition (per scenario: hash, status, golden)
  int64_t largest_message = 0;
  double seconds = 0;  // inside the exchanges (after a barrier: transfer, not waiting for slower ranks)
};
template <class V>
void visit_fields(FleetExchange& x, V& v) {
  v("backend", x.backend);
  v("exchanges", x.exchanges);
  v("bytes_sent", x.bytes_sent);
  v("bytes_received", x.bytes_received);
  v("identity_bytes", x.identity_bytes);
  v("runs_bytes", x.runs_bytes);
  v("largest_message", x.largest_message);
  v("seconds", x.seconds);
}

struct FleetSummary {
  std::string format = "ampcheck-fleet";
  int64_t format_version = 1;
  std::string ampcheck_version, created;
  int64_t world_size = 0, repetitions = 0;
  double duration_s = 0;  // --duration asked (0: none)
  double elapsed_s = 0;   // rank 0's wall clock over the repetitions
  std::vector<std::string> scenarios;
  bool pass = false;
  std::string verdict;  // one sentence
  // why the fleet ended before its repetitions did ("" it ran to the end): a rank lost or the job stopped; the report
  // then holds the `repetitions` every rank finished
  std::string stopped;
  std::vector<int64_t> lost_ranks;
  std::vector<FleetGroupRow> groups;
  std::vector<FleetRankRow> ranks;
  std::vector<validate::FleetVote> votes;          // every vote (group x scenario x repetition): sides, who is blamed
  std::vector<std::string> plants_without_effect;  // "rank 1: bitflip:...": runs bit for bit the golden's / peers'
  FleetExchange exchange;
};
template <class V>
void visit_fields(FleetSummary& s, V& v) {
  v.required("format", s.format);
  v.required("format_version", s.format_version);
  v("ampcheck_version", s.ampcheck_version);
  v("created", s.created);
  v("world_size", s.world_size);
  v("repetitions", s.repetitions);
  v("duration_s", s.duration_s);
  v("elapsed_s", s.elapsed_s);
  v("scenarios", s.scenarios);
  v.required("pass", s.pass);
  v("verdict", s.verdict);
  v("stopped", s.stopped);
  v("lost_ranks", s.lost_ranks);
  v("groups", s.groups);
  v("ranks", s.ranks);
  v("votes", s.votes);
  v("plants_without_effect", s.plants_without_effect);
  v("exchange", s.exchange);
}

// The summary from what every rank gathered (fleet_summary.cpp): per repetition r, votes[r], runs[r] (rank order)
// and the outliers' findings[r]. The same on every rank: each computes its exit code from it.
FleetSummary summarize_fleet(const std::vector<validate::FleetRankIdentity>& ids,
                             const std::vector<validate::FleetGroup>& groups,
                             const std::vector<std::vector<validate::FleetVote>>& votes,
                             const std::vector<std::vector<validate::FleetRuns>>& runs,
                             const std::vector<std::vector<validate::FleetFinding>>& findings);

// The fleet ended early (validate_fleet.cpp, from distributed::RankWatch): `lost` ranks (rank -> what is known of it,
// one sentence) marked `lost`, `why` in `stopped`, the verdict says so and fails; the repetitions stay those done.
void mark_stopped(FleetSummary& s, const std::vector<std::pair<int64_t, std::string>>& lost, const std::string& why);

// The four files, as text.
std::string fleet_summary_json(const FleetSummary& s);
std::string fleet_summary_md(const FleetSummary& s);
std::string fleet_junit_xml(const FleetSummary& s);
std::string fleet_report_html(const FleetSummary& s);

}  // namespace ampcheck::usecases
