// The fleet's summary from what every rank gathered (fleet_report.h summarize_fleet): per rank its status over the
// repetitions (agrees — cleared by the golden or with its majority —, differs from its golden, outlier k/N with every
// finding, non-finite, diverges from the main stack, cannot tell, run failed), per group its drift from the main group
// and its goldens, every vote, the plants that had no effect, and the verdict in one sentence. Pure: every rank
// computes the same summary, and so the same exit code.
#include "usecases/fleet_report.h"

#include "trajectory/run_status.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace ampcheck::usecases {

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
// "its statistical verdict against the cpu FP32 references is diverges (...)"
std::string statistical_words(const validate::FleetRun& r) {
  return "its statistical verdict against the " + r.reference_class + " FP32 references is " + r.statistical_verdict +
         (r.statistical_message.empty() ? "" : " (" + r.statistical_message + ")");
}

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s;
  for (int64_t r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// What a plant did to a rank's run of one scenario: changed its bits (against the golden or an unplanted peer of its
// group), left them as they were, or nothing to measure it against.
enum class PlantEffect { Changed, None, Unmeasured };

// What the group's majorities did against their class's goldens over every vote.
struct GoldenTally {
  int64_t identical = 0, differs = 0, not_compared = 0;
  std::string first_difference, why_not;  // the first "differs" message; why a golden was not compared
};

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
    return "whose " + statistical_words(majority).substr(4) + ", while its own run tracks them";
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
               ranks_text(side.ranks);
    k.first_undecided =
        "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": its group's ranks split " + sides;
  }
}

// The group's majority against its class's golden.
void tally_golden(const validate::FleetVote& v, GoldenTally& t) {
  if (v.against_golden) {
    if (v.outliers.empty()) ++t.identical;
    else if (t.differs++ == 0)
      t.first_difference = v.scenario + ": rank" + (v.outliers.size() > 1 ? "s " : " ") + ranks_text(v.outliers) +
                           " differ" + (v.outliers.size() > 1 ? "" : "s") +
                           (v.cleared.empty() ? ""
                                              : ", rank" + std::string(v.cleared.size() > 1 ? "s " : " ") +
                                                    ranks_text(v.cleared) + " identical");
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
          (fails_references(*own) ? "; " + statistical_words(*own) : "");
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
        "repetition " + std::to_string(at.rep1) + ", " + at.v.scenario + ": " + statistical_words(*own);
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

// ---- the rows

FleetGroupRow group_row(const validate::FleetGroup& g, const std::vector<validate::FleetRankIdentity>& ids,
                        const GoldenTally& t, int64_t no_majority) {
  FleetGroupRow row;
  row.id = g.id;
  row.ranks = g.ranks;
  row.golden_class = g.golden_class;
  row.main = g.id == 0;
  row.drift = g.drift_description;
  row.drift_keys = g.drift;
  row.varying_keys = g.varying_keys;
  std::set<std::string> hosts;
  for (int64_t r : g.ranks) hosts.insert(ids.at(static_cast<size_t>(r)).host);
  row.hosts.assign(hosts.begin(), hosts.end());
  if (t.differs > 0)
    row.goldens = "ranks differ from the " + g.golden_class + " golden in " + plural(t.differs, "vote", "votes") +
                  " (" + t.first_difference + ")" +
                  (t.identical ? "; identical on every rank in " + plural(t.identical, "vote", "votes") : "");
  else if (t.identical > 0)
    row.goldens = "identical to the " + g.golden_class + " goldens (" + plural(t.identical, "vote", "votes") +
                  (t.not_compared ? ", " + std::to_string(t.not_compared) + " without a golden" : "") + ")";
  else
    row.goldens = t.why_not.empty() ? "no golden compared" : t.why_not;
  row.no_majority = no_majority;
  return row;
}

// Every finding of a rank, each as "; repetition R, scenario, against X: difference; replayed: ...".
std::string every_finding(const std::vector<validate::FleetFinding>& findings) {
  std::string every;
  for (const auto& f : findings)
    every += "; repetition " + std::to_string(f.repetition) + ", " + f.scenario + ", against " +
             (f.against.empty() ? "the majority (rank " + std::to_string(f.majority_rank) + ")" : f.against) + ": " +
             f.difference +
             "; replayed: " + (f.replay == validate::ReplayKind::NotReplayed ? "-" : to_string(f.replay)) +
             (f.replay_message.empty() ? "" : " (" + f.replay_message + ")");
  return every;
}

// A rank's status and its message, the worst thing seen first: a run that failed, blame (the golden's, then the
// majority's), non-finite, diverges, cannot tell, else agrees.
void rank_status(FleetRankRow& r, const RankTally& k, const FleetGroupRow& g) {
  const std::string where = "rank " + std::to_string(r.rank) + " (" + r.host + ", " + r.device +
                            (r.gpu_uuid.empty() ? ", " + r.cpu_model : ", " + r.gpu_uuid) +
                            (r.pci_bus.empty() ? "" : ", PCI " + r.pci_bus) + ")";
  const std::string drift =
      g.drift.empty() ? "" : "; its group is configuration drift from the main stack (" + g.drift + ")";
  const std::string every = every_finding(r.findings);
  if (k.failed_runs > 0) {
    r.status = FleetRankStatus::RunFailed;
    r.message = where + ": a run failed in " + plural(k.failed_runs, "case", "cases") + " (" + k.first_error + ")";
  } else if (k.blamed > 0 && k.golden_blame) {
    r.status = FleetRankStatus::DiffersFromGolden;
    r.message = where + " differs from the " + r.golden_class + " golden in " + r.rate + " repetition(s)" +
                (k.cleared ? " (identical to it in " + plural(k.cleared, "vote", "votes") + ")" : "") +
                (k.nonfinite ? "; " + k.first_nonfinite : "") + every;
  } else if (k.blamed > 0) {
    r.status = FleetRankStatus::Outlier;
    r.message = where + " differs from its group's majority in " + r.rate + " repetition(s)" +
                (k.nonfinite ? "; " + k.first_nonfinite : "") + every;
  } else if (k.nonfinite > 0) {
    r.status = FleetRankStatus::NonFinite;
    r.message = where + ": a fault whatever its fingerprint — " + k.first_nonfinite + " (" +
                plural(k.nonfinite, "case", "cases") + ")" + drift + every;
  } else if (k.diverged > 0) {
    r.status = FleetRankStatus::Diverges;
    r.message = where + ": judged statistically, a fault whatever its fingerprint — " + k.first_divergence + drift;
  } else if (k.undecided > 0) {
    r.status = FleetRankStatus::CannotTell;
    r.message = where + ": cannot tell which side is wrong — " + k.first_undecided +
                ", no golden was compared and no side holds a majority of " +
                std::to_string(validate::kFleetMinMajority) +
                " ranks or more (a smaller majority may itself carry the fault: two ranks with the same flip "
                "out-vote a healthy one). HINT: validate against a golden of class " +
                r.golden_class + " (`ampcheck validate --record` on a known-good machine, then --references), " +
                "or run with more ranks of this stack";
  } else {
    r.status = FleetRankStatus::Agrees;
    r.message =
        where +
        (k.cleared ? " is bit for bit the " + r.golden_class + " golden's in " + plural(k.cleared, "vote", "votes") +
                         " (cleared by the golden)"
                   : " agrees with its group's majority in " + plural(r.repetitions, "repetition", "repetitions")) +
        drift;
    if (k.held > 0)
      r.message += "; not blamed in " + plural(k.held, "vote", "votes") + " (a failing majority does not outvote a " +
                   "sound run): " + k.first_held;
    if (r.loss_deviation >= 0) {
      std::ostringstream os;
      os << "; compared with the main stack statistically: largest relative loss difference " << r.loss_deviation
         << " (tolerance " << validate::kFleetDriftLossTolerance << ")";
      r.message += os.str();
    }
    if (!r.statistical.empty()) r.message += "; statistically, it " + r.statistical;
  }
}

// validate's statistical verdicts on a rank's runs, in words (the row's `statistical`; "" none judged).
std::string statistical_summary(const RankTally& k) {
  if (k.judged == 0) return "";
  const std::string of = " in " + std::to_string(k.judged_pass) + " of " + plural(k.judged, "run", "runs");
  if (k.judged_pass == k.judged) return "tracks the " + k.reference_class + " FP32 references" + of;
  return "fails the " + k.reference_class + " FP32 references in " + std::to_string(k.judged - k.judged_pass) + " of " +
         plural(k.judged, "run", "runs") + " (" + k.first_statistical_failure + ")";
}

// A rank's plant that had no effect (added to without_effect), or whose effect cannot be measured: said in its message.
void plant_note(FleetRankRow& r, const RankTally& k, std::vector<std::string>& without_effect) {
  if (k.planted_reps > 0 && k.unaffected_reps == k.planted_reps) {
    without_effect.push_back("rank " + std::to_string(r.rank) + ": " + r.plants);
    r.message += "; its plant (" + r.plants + ") had no measurable effect: its runs are bit for bit " +
                 (k.cleared ? "the golden's" : "its unplanted peers'") + " in " +
                 plural(k.planted_reps, "planted repetition", "planted repetitions");
  } else if (k.planted_reps > 0 && k.unmeasured_reps > 0 && r.status == FleetRankStatus::Agrees)
    r.message += "; its plant (" + r.plants +
                 ")'s effect cannot be measured: no unplanted peer of its stack and no golden to compare with";
}

FleetRankRow rank_row(const validate::FleetRankIdentity& id, int64_t group, const RankTally& k, FleetSummary& s) {
  FleetRankRow r;
  static_cast<validate::FleetRankPlace&>(r) = id;  // where it runs, as its identity says
  r.group = group;
  r.repetitions = s.repetitions;
  r.disagreements = k.disagreements;
  r.rate = std::to_string(r.disagreements) + "/" + std::to_string(r.repetitions);
  r.findings = k.findings;
  r.loss_deviation = k.deviation;
  r.statistical = statistical_summary(k);
  rank_status(r, k, s.groups.at(static_cast<size_t>(r.group)));
  plant_note(r, k, s.plants_without_effect);
  r.pass = r.status == FleetRankStatus::Agrees;
  return r;
}

// ---- the groups' results and the verdict

// Each group passes when all its ranks pass; the number of failing ranks.
int64_t judge_groups(FleetSummary& s) {
  int64_t failing = 0;
  for (auto& g : s.groups) {
    int64_t bad = 0;
    for (int64_t r : g.ranks) bad += s.ranks.at(static_cast<size_t>(r)).pass ? 0 : 1;
    g.pass = bad == 0;
    g.message = std::string(g.pass ? "PASS" : "FAIL") + ": " +
                plural(static_cast<int64_t>(g.ranks.size()), "rank", "ranks") +
                (g.ranks.size() == 1 ? " (no peers: its majority is itself)" : "") +
                (bad ? ", " + std::to_string(bad) + " failing" : "") + "; goldens: " + g.goldens +
                (g.drift.empty() ? "" : "; configuration drift from the main group: " + g.drift) +
                (g.no_majority ? "; " + plural(g.no_majority, "vote", "votes") + " without a majority" : "");
    failing += bad;
  }
  return failing;
}

// "FAIL: n ranks of N — " and the ranks by what was found, blame first; "cannot tell" names no one.
std::string failing_ranks(const FleetSummary& s, int64_t failing) {
  const std::vector<std::pair<FleetRankStatus, std::string>> order = {
      {FleetRankStatus::DiffersFromGolden, "the golden outranks the majority: blamed"},
      {FleetRankStatus::Outlier,
       "outliers of a majority of " + std::to_string(validate::kFleetMinMajority) + "+ ranks"},
      {FleetRankStatus::NonFinite, "non-finite (a fault whatever the fingerprint)"},
      {FleetRankStatus::Diverges, "diverges (statistically: from the FP32 references or the main stack)"},
      {FleetRankStatus::RunFailed, "a run failed"},
      {FleetRankStatus::Lost, "lost"},
      {FleetRankStatus::CannotTell, "cannot tell which side is wrong (no golden, no majority of " +
                                        std::to_string(validate::kFleetMinMajority) + "+ ranks)"}};
  std::string parts;
  for (const auto& [status, words] : order) {
    std::vector<int64_t> who;
    for (const auto& r : s.ranks)
      if (r.status == status) who.push_back(r.rank);
    if (!who.empty())
      parts += (parts.empty() ? "" : "; ") + words + ": " + (who.size() == 1 ? "rank " : "ranks ") + ranks_text(who);
  }
  std::vector<int64_t> ok;
  for (const auto& r : s.ranks)
    if (r.pass) ok.push_back(r.rank);
  return "FAIL: " + plural(failing, "rank", "ranks") + " of " + std::to_string(s.world_size) + " — " + parts +
         (ok.empty() ? "" : "; passing: " + std::string(ok.size() == 1 ? "rank " : "ranks ") + ranks_text(ok));
}

// The verdict in one sentence: PASS or the failing ranks, then the drift groups and the plants without effect.
std::string fleet_verdict(const FleetSummary& s, int64_t failing) {
  std::string verdict = s.pass ? "PASS: every rank agrees with its group's majority" +
                                     std::string(s.repetitions > 1 ? " in every repetition" : "") +
                                     " and with the goldens compared"
                               : failing_ranks(s, failing);
  std::string drift;
  for (const auto& g : s.groups)
    if (!g.drift.empty())
      drift += (drift.empty() ? "" : "; ") + std::string(g.ranks.size() == 1 ? "rank " : "ranks ") +
               ranks_text(g.ranks) + ": " + g.drift;
  if (!drift.empty()) verdict += "; configuration drift (separate groups, nobody called corrupt): " + drift;
  if (!s.plants_without_effect.empty()) {
    std::string ps;
    for (const auto& p : s.plants_without_effect) ps += (ps.empty() ? "" : "; ") + p;
    verdict += "; plants with no measurable effect: " + ps;
  }
  return verdict;
}

}  // namespace

// The phases: every repetition tallied, the groups' rows, the ranks' rows, the groups judged, the verdict.
FleetSummary summarize_fleet(const std::vector<validate::FleetRankIdentity>& ids,
                             const std::vector<validate::FleetGroup>& groups,
                             const std::vector<std::vector<validate::FleetVote>>& votes,
                             const std::vector<std::vector<validate::FleetRuns>>& runs,
                             const std::vector<std::vector<validate::FleetFinding>>& findings) {
  const FleetInputs in{ids, groups, votes, runs, findings, plants_of(ids)};
  FleetSummary s;
  s.world_size = static_cast<int64_t>(ids.size());
  s.repetitions = static_cast<int64_t>(runs.size());
  if (!runs.empty() && !runs[0].empty())
    for (const auto& r : runs[0][0].runs) s.scenarios.push_back(r.scenario);
  FleetTally t;
  t.ranks.resize(ids.size());
  for (size_t rep = 0; rep < runs.size(); ++rep) tally_repetition(in, rep, t);
  s.votes = std::move(t.votes);
  for (const auto& g : groups) s.groups.push_back(group_row(g, ids, t.golden[g.id], t.no_majority[g.id]));
  std::map<int64_t, int64_t> group_of;
  for (const auto& g : groups)
    for (int64_t r : g.ranks) group_of[r] = g.id;
  for (const auto& id : ids)
    s.ranks.push_back(rank_row(id, group_of[id.rank], t.ranks[static_cast<size_t>(id.rank)], s));
  const int64_t failing = judge_groups(s);
  s.pass = failing == 0 && !s.ranks.empty();
  s.verdict = fleet_verdict(s, failing);
  return s;
}

void mark_stopped(FleetSummary& s, const std::vector<std::pair<int64_t, std::string>>& lost, const std::string& why) {
  s.stopped = why;
  s.pass = false;
  for (const auto& [rank, message] : lost) {
    s.lost_ranks.push_back(rank);
    if (rank < 0 || static_cast<size_t>(rank) >= s.ranks.size()) continue;
    FleetRankRow& r = s.ranks[static_cast<size_t>(rank)];
    r.status = FleetRankStatus::Lost;
    r.pass = false;
    r.message = message;
    for (auto& g : s.groups)
      if (std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end()) g.pass = false;
  }
  s.verdict = "INCOMPLETE: " + why + ". Of the " + plural(s.repetitions, "repetition", "repetitions") +
              " every rank finished: " + s.verdict;
}

}  // namespace ampcheck::usecases
