// The fleet's summary from what every rank gathered (fleet_report.h summarize_fleet): per rank its status over the
// repetitions (agrees — cleared by the golden or with its majority —, differs from its golden, outlier k/N with every
// finding, non-finite, diverges from the main stack, cannot tell, run failed), per group its drift from the main group
// and its goldens, every vote, the plants that had no effect, and the verdict in one sentence. Pure: every rank
// computes the same summary, and so the same exit code.
#include "usecases/fleet_report.h"
#include "usecases/fleet_tally.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace ampcheck::usecases {

namespace {

using validate::FleetRankStatus;

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
      parts += (parts.empty() ? "" : "; ") + words + ": " + (who.size() == 1 ? "rank " : "ranks ") +
               validate::rank_list(who);
  }
  std::vector<int64_t> ok;
  for (const auto& r : s.ranks)
    if (r.pass) ok.push_back(r.rank);
  return "FAIL: " + plural(failing, "rank", "ranks") + " of " + std::to_string(s.world_size) + " — " + parts +
         (ok.empty() ? "" : "; passing: " + std::string(ok.size() == 1 ? "rank " : "ranks ") + validate::rank_list(ok));
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
               validate::rank_list(g.ranks) + ": " + g.drift;
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
  FleetSummary s;
  s.world_size = static_cast<int64_t>(ids.size());
  s.repetitions = static_cast<int64_t>(runs.size());
  if (!runs.empty() && !runs[0].empty())
    for (const auto& r : runs[0][0].runs) s.scenarios.push_back(r.scenario);
  FleetTally t = tally_fleet(ids, groups, votes, runs, findings);
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
