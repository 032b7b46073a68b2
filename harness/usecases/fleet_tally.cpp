// The fleet's tally (fleet_tally.h): each vote of each repetition read for what it says of each rank — its outliers
// and cleared ranks, a split nobody can decide, the goldens, the plants' effects, runs gone non-finite, the statistical
// verdicts, a drift group against the main stack — then the runs that failed and the ranks that disagreed.
#include "usecases/fleet_tally.h"

#include "trajectory/run_status.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace ampcheck::usecases {

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

namespace {

using trajectory::RunStatus;
using validate::FleetRankStatus;
using validate::GoldenResult;

// A rank's run ended so.
bool ended(const validate::FleetRun& r, RunStatus s) { return r.status == s; }
// A run that validate's statistical verdict against the FP32 references failed (not judged: false).
bool fails_references(const validate::FleetRun& r) { return !r.statistical_verdict.empty() && !r.statistical_pass; }
// A run that completed and, where it was judged against the FP32 references, passed.
bool sound(const validate::FleetRun& r) { return ended(r, RunStatus::Completed) && !fails_references(r); }
// "statistical verdict against the cpu FP32 references is diverges (...)", after "its" or "whose"
std::string statistical_words(const validate::FleetRun& r) {
  return "statistical verdict against the " + r.reference_class + " FP32 references is " + r.statistical_verdict +
         (r.statistical_message.empty() ? "" : " (" + r.statistical_message + ")");
}

// What a plant did to a rank's run of one scenario: changed its bits (against the golden or an unplanted peer of its
// group), left them as they were, or nothing to measure it against.
enum class PlantEffect { Changed, None, Unmeasured };

// What summarize_fleet reads: every rank's identity, the groups, and per repetition (0-based here) the votes, the runs
// (rank order) and the outliers' findings; the plants aimed at each rank.
struct FleetInputs {
  const std::vector<validate::FleetRankIdentity>& ids;
  const std::vector<validate::FleetGroup>& groups;
  const std::vector<std::vector<validate::FleetVote>>& votes;
  const std::vector<std::vector<validate::FleetRuns>>& runs;
  const std::vector<std::vector<validate::FleetFinding>>& findings;
  std::vector<validate::RankPlant> plants;  // --plant-rank's, the same on every rank: checked before training

  bool planted(int64_t rank, int64_t rep1) const {  // rep1: 1-based
    for (const auto& p : plants)
      if (p.rank == rank && (p.repetition == 0 || p.repetition == rep1)) return true;
    return false;
  }
  const validate::FleetRun* run_of(size_t rep, int64_t rank, const std::string& name) const {
    if (rank < 0 || static_cast<size_t>(rank) >= runs[rep].size()) return nullptr;
    for (const auto& r : runs[rep][static_cast<size_t>(rank)].runs)
      if (r.scenario == name) return &r;
    return nullptr;
  }
};

// The plants aimed at each rank, as rank 0's identity gives its --plant-rank (words that do not parse: none).
std::vector<validate::RankPlant> plants_of(const std::vector<validate::FleetRankIdentity>& ids) {
  std::vector<validate::RankPlant> plants;
  for (const auto& kv : ids.empty() ? std::vector<validate::FleetKeyValue>{} : ids.front().options)
    if (kv.key == "--plant-rank" && kv.value != "(none)") {
      std::istringstream words(kv.value);
      for (std::string w; words >> w;) {
        try {
          plants.push_back(validate::parse_plant_rank(w));
        } catch (const std::exception&) {
        }
      }
    }
  return plants;
}

// One vote in one repetition, as the tallies read it.
struct VoteAt {
  size_t rep;    // 0-based
  int64_t rep1;  // 1-based, as said
  const validate::FleetVote& v;
  const validate::FleetGroup& g;
};

// ---- one vote, each thing it says

// Why an outlier of a majority (no golden) is not blamed ("" it is): the majority's runs went non-finite where its own
// completed, or they fail the FP32 references where its own passes them — a failing majority is a fault on its own
// (tally_nonfinite, tally_statistical) and does not outvote a sound run.
std::string majority_fails(const validate::FleetRun& majority, const validate::FleetRun& own) {
  if (ended(majority, RunStatus::NonFinite) && ended(own, RunStatus::Completed))
    return "whose runs went non-finite after " + plural(majority.steps, "step", "steps") + ", while its own completed";
  if (fails_references(majority) && !own.statistical_verdict.empty() && sound(own))
    return "whose " + statistical_words(majority) + ", while its own run tracks them";
  return "";
}

// Its outliers (a run that failed is said as such elsewhere) and the ranks the golden cleared; an outlier of a failing
// majority is not blamed (majority_fails).
void tally_outliers(const FleetInputs& in, const VoteAt& at, FleetTally& t, std::set<int64_t>& differed) {
  const validate::FleetRun* majority = in.run_of(at.rep, at.v.majority_rank, at.v.scenario);
  for (int64_t o : at.v.outliers) {
    const validate::FleetRun* own = in.run_of(at.rep, o, at.v.scenario);
    if (!own || own->trajectory_hash.empty()) continue;
    const std::string why = !at.v.against_golden && majority ? majority_fails(*majority, *own) : "";
    if (!why.empty()) {
      RankTally& k = t.ranks[static_cast<size_t>(o)];
      if (k.held++ == 0)
        k.first_held = "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": it differs from its " +
                       "group's majority (rank " + std::to_string(at.v.majority_rank) + "), " + why;
      continue;
    }
    differed.insert(o);
    ++t.ranks[static_cast<size_t>(o)].blamed;
    if (at.v.against_golden) t.ranks[static_cast<size_t>(o)].golden_blame = true;
  }
  for (int64_t c : at.v.cleared) ++t.ranks[static_cast<size_t>(c)].cleared;
}

// A vote that cannot tell: a side whose runs went non-finite where other ranks' completed is a fault on its own
// (tally_nonfinite): the split it makes is explained; the vote cannot tell only between sides that remain.
void tally_undecided(const FleetInputs& in, const VoteAt& at, FleetTally& t) {
  size_t open_sides = 0;  // sides that neither went non-finite nor fail the FP32 references
  for (const auto& side : at.v.sides) {
    const validate::FleetRun* r = in.run_of(at.rep, side.ranks.front(), at.v.scenario);
    open_sides += r && !ended(*r, RunStatus::NonFinite) && !fails_references(*r) ? 1 : 0;
  }
  if (!at.v.cannot_tell || open_sides < 2) return;
  for (int64_t r : at.g.ranks) {
    RankTally& k = t.ranks[static_cast<size_t>(r)];
    if (k.undecided++ > 0) continue;
    std::string sides;
    for (const auto& side : at.v.sides)
      sides += (sides.empty() ? "" : " | ") + std::string(side.ranks.size() == 1 ? "rank " : "ranks ") +
               validate::rank_list(side.ranks);
    k.first_undecided =
        "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": its group's ranks split " + sides;
  }
}

// The group's majority against its class's golden.
void tally_golden(const validate::FleetVote& v, GoldenTally& t) {
  if (v.against_golden) {
    if (v.outliers.empty()) ++t.identical;
    else if (t.differs++ == 0)
      t.first_difference = v.scenario + ": rank" + (v.outliers.size() > 1 ? "s " : " ") +
                           validate::rank_list(v.outliers) + " differ" + (v.outliers.size() > 1 ? "" : "s") +
                           (v.cleared.empty() ? ""
                                              : ", rank" + std::string(v.cleared.size() > 1 ? "s " : " ") +
                                                    validate::rank_list(v.cleared) + " identical");
  } else if (++t.not_compared == 1)
    t.why_not = v.golden_message;
}

// A rank's plant with no effect: its run is bit for bit the golden's, or an unplanted peer's of its group.
void tally_plant_effect(const FleetInputs& in, const VoteAt& at, std::map<int64_t, std::set<PlantEffect>>& effect) {
  std::set<std::string> good;
  for (const auto& side : at.v.sides) {
    bool unplanted = side.golden_result == GoldenResult::Identical;
    for (int64_t r : side.ranks) unplanted = unplanted || !in.planted(r, at.rep1);
    if (unplanted) good.insert(side.hash);
  }
  for (int64_t r : at.g.ranks)
    if (in.planted(r, at.rep1)) {
      const validate::FleetRun* own = in.run_of(at.rep, r, at.v.scenario);
      if (!own || own->trajectory_hash.empty()) continue;
      effect[r].insert(good.empty()                       ? PlantEffect::Unmeasured
                       : good.count(own->trajectory_hash) ? PlantEffect::None
                                                          : PlantEffect::Changed);
    }
}

// A run that went non-finite where another rank's completed, where the FP32 references say it should not, or where the
// scenario expects it to complete (a validation scenario always does): a fault whatever its fingerprint or its vote.
void tally_nonfinite(const FleetInputs& in, const VoteAt& at, FleetTally& t, std::set<int64_t>& differed) {
  bool any_completed = false;
  for (size_t k = 0; k < in.runs[at.rep].size(); ++k) {
    const validate::FleetRun* r = in.run_of(at.rep, static_cast<int64_t>(k), at.v.scenario);
    any_completed = any_completed || (r && ended(*r, RunStatus::Completed));
  }
  for (int64_t r : at.g.ranks) {
    const validate::FleetRun* own = in.run_of(at.rep, r, at.v.scenario);
    if (!own || !ended(*own, RunStatus::NonFinite) ||
        !(any_completed || fails_references(*own) || !own->nonfinite_expected))
      continue;
    differed.insert(r);
    RankTally& k = t.ranks[static_cast<size_t>(r)];
    if (k.nonfinite++ == 0)
      k.first_nonfinite =
          "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": its run went non-finite after " +
          plural(own->steps, "step", "steps") +
          (any_completed ? " where other ranks' runs completed"
                         : std::string(" where no rank's run completed") +
                               (own->nonfinite_expected ? "" : " (the scenario expects its run to complete)")) +
          (fails_references(*own) ? "; its " + statistical_words(*own) : "");
  }
}

// validate's statistical verdict on each run against the FP32 references: counted for the rank's row; a completed
// run that fails it diverges — a fault whatever its fingerprint or its vote (a non-finite one: tally_nonfinite).
void tally_statistical(const FleetInputs& in, const VoteAt& at, FleetTally& t, std::set<int64_t>& differed) {
  for (int64_t r : at.g.ranks) {
    const validate::FleetRun* own = in.run_of(at.rep, r, at.v.scenario);
    if (!own || own->statistical_verdict.empty()) continue;
    RankTally& k = t.ranks[static_cast<size_t>(r)];
    ++k.judged;
    k.reference_class = own->reference_class;
    if (!fails_references(*own)) {
      ++k.judged_pass;
      continue;
    }
    const std::string said =
        "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": its " + statistical_words(*own);
    if (k.first_statistical_failure.empty()) k.first_statistical_failure = said;
    if (!ended(*own, RunStatus::Completed)) continue;
    differed.insert(r);
    if (k.diverged++ == 0) k.first_divergence = said;
  }
}

// The main stack's reference run of each scenario in one repetition: the golden's side, else the majority (none:
// cannot tell).
std::map<std::string, int64_t> main_references(const std::vector<validate::FleetVote>& votes) {
  std::map<std::string, int64_t> main_reference;
  for (const auto& v : votes)
    if (v.group == 0) {
      if (!v.cleared.empty()) main_reference[v.scenario] = v.cleared.front();
      else if (!v.against_golden && !v.cannot_tell && v.majority_rank >= 0)
        main_reference[v.scenario] = v.majority_rank;
    }
  return main_reference;
}

// The largest relative loss difference of a run from another, and its step (-1: none).
std::pair<double, int64_t> worst_loss_difference(const validate::FleetRun& own, const validate::FleetRun& main_run) {
  double worst = 0;
  int64_t at = -1;
  const size_t steps = std::min(own.losses.size(), main_run.losses.size());
  for (size_t i = 0; i < steps; ++i) {
    const double a = own.losses[i], b = main_run.losses[i];
    const double d =
        std::isfinite(a) ? std::abs(a - b) / std::max(std::abs(b), 1e-12) : std::numeric_limits<double>::infinity();
    if (d > worst || !std::isfinite(d)) {
      worst = d;
      at = static_cast<int64_t>(i);
    }
  }
  return {worst, at};
}

// A drift group: its ranks against the main stack's reference run, statistically (the loss at every step).
void tally_drift(const FleetInputs& in, const VoteAt& at, const std::map<std::string, int64_t>& main_reference,
                 FleetTally& t, std::set<int64_t>& differed) {
  const auto ref = main_reference.find(at.v.scenario);
  if (at.g.id == 0 || ref == main_reference.end()) return;
  const validate::FleetRun* main_run = in.run_of(at.rep, ref->second, at.v.scenario);
  if (!main_run || !ended(*main_run, RunStatus::Completed)) return;
  for (int64_t r : at.g.ranks) {
    const validate::FleetRun* own = in.run_of(at.rep, r, at.v.scenario);
    if (!own || !ended(*own, RunStatus::Completed)) continue;
    const auto [worst, step] = worst_loss_difference(*own, *main_run);
    RankTally& k = t.ranks[static_cast<size_t>(r)];
    k.deviation = std::max(k.deviation, worst);
    if (!(worst > validate::kFleetDriftLossTolerance)) continue;  // within it (a NaN difference too)
    differed.insert(r);
    if (k.diverged++ == 0) {
      std::ostringstream os;
      os << "repetition " << at.rep1 << ", " << at.v.scenario << ": its loss differs from the main stack's (rank "
         << ref->second << ") by " << worst << " (relative) at step " << step << ", beyond "
         << validate::kFleetDriftLossTolerance << " — more than configuration drift moves it";
      k.first_divergence = os.str();
    }
  }
}

// ---- one repetition: every vote, the plants' effects, the runs that failed, the ranks that disagreed

void tally_repetition(const FleetInputs& in, size_t rep, FleetTally& t) {
  const auto rep1 = static_cast<int64_t>(rep + 1);
  std::set<int64_t> differed;
  for (const auto& f : in.findings[rep]) t.ranks.at(static_cast<size_t>(f.rank)).findings.push_back(f);
  const std::map<std::string, int64_t> main_reference = main_references(in.votes[rep]);
  std::map<int64_t, std::set<PlantEffect>> planted_effect;  // rank -> the effects seen in this repetition
  for (const auto& v0 : in.votes[rep]) {
    validate::FleetVote v = v0;
    v.repetition = rep1;
    t.votes.push_back(v);
    const VoteAt at{rep, rep1, v, in.groups.at(static_cast<size_t>(v.group))};
    if (v.no_majority) ++t.no_majority[at.g.id];
    tally_outliers(in, at, t, differed);
    tally_undecided(in, at, t);
    tally_golden(v, t.golden[at.g.id]);
    tally_plant_effect(in, at, planted_effect);
    tally_nonfinite(in, at, t, differed);
    tally_statistical(in, at, t, differed);
    tally_drift(in, at, main_reference, t, differed);
  }
  for (const auto& [r, seen] : planted_effect) {
    RankTally& k = t.ranks[static_cast<size_t>(r)];
    ++k.planted_reps;
    if (seen.count(PlantEffect::Unmeasured) && !seen.count(PlantEffect::Changed)) ++k.unmeasured_reps;
    else if (!seen.count(PlantEffect::Changed))
      ++k.unaffected_reps;
  }
  for (size_t k = 0; k < in.runs[rep].size(); ++k)
    for (const auto& r : in.runs[rep][k].runs)
      if (ended(r, RunStatus::Error) && t.ranks[k].failed_runs++ == 0)
        t.ranks[k].first_error = r.scenario + ": " + r.error;
  for (int64_t r : differed) ++t.ranks.at(static_cast<size_t>(r)).disagreements;
}

}  // namespace

FleetTally tally_fleet(const std::vector<validate::FleetRankIdentity>& ids,
                       const std::vector<validate::FleetGroup>& groups,
                       const std::vector<std::vector<validate::FleetVote>>& votes,
                       const std::vector<std::vector<validate::FleetRuns>>& runs,
                       const std::vector<std::vector<validate::FleetFinding>>& findings) {
  const FleetInputs in{ids, groups, votes, runs, findings, plants_of(ids)};
  FleetTally t;
  t.ranks.resize(ids.size());
  for (size_t rep = 0; rep < runs.size(); ++rep) tally_repetition(in, rep, t);
  return t;
}

}  // namespace ampcheck::usecases
