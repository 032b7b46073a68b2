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

// A rank's run ended so (its status word, engine::status_name: trajectory/run_status.h).
bool ended(const validate::FleetRun& r, RunStatus s) { return trajectory::parse_run_status(r.status) == s; }

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

}  // namespace

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
  std::map<int64_t, int64_t> group_of;
  for (const auto& g : groups)
    for (int64_t r : g.ranks) group_of[r] = g.id;
  const size_t n = ids.size();
  // the plants aimed at each rank, per repetition (--plant-rank, the same on every rank: checked before training)
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
  auto planted = [&](int64_t rank, int64_t rep) {  // rep: 1-based
    for (const auto& p : plants)
      if (p.rank == rank && (p.repetition == 0 || p.repetition == rep)) return true;
    return false;
  };
  auto run_of = [&](size_t rep, int64_t rank, const std::string& name) -> const validate::FleetRun* {
    if (rank < 0 || static_cast<size_t>(rank) >= runs[rep].size()) return nullptr;
    for (const auto& r : runs[rep][static_cast<size_t>(rank)].runs)
      if (r.scenario == name) return &r;
    return nullptr;
  };
  auto has = [](const std::vector<int64_t>& xs, int64_t x) { return std::find(xs.begin(), xs.end(), x) != xs.end(); };

  // ---- per rank, over the repetitions
  std::vector<int64_t> disagreements(n, 0), failed_runs(n, 0), blamed(n, 0), nonfinite(n, 0), diverged(n, 0),
      undecided(n, 0), cleared(n, 0), planted_reps(n, 0), unaffected_reps(n, 0), unmeasured_reps(n, 0);
  std::vector<bool> golden_blame(n, false);
  std::vector<double> deviation(n, -1);
  std::vector<std::string> first_error(n), first_nonfinite(n), first_divergence(n), first_undecided(n);
  std::vector<std::vector<validate::FleetFinding>> rank_findings(n);
  std::map<int64_t, GoldenTally> golden;  // by group
  std::map<int64_t, int64_t> group_no_majority;
  for (size_t rep = 0; rep < runs.size(); ++rep) {
    const auto rep1 = static_cast<int64_t>(rep + 1);
    std::set<int64_t> differed;
    for (const auto& f : findings[rep]) rank_findings.at(static_cast<size_t>(f.rank)).push_back(f);
    // the main stack's reference run of each scenario: the golden's side, else the majority (none: cannot tell)
    std::map<std::string, int64_t> main_reference;
    for (const auto& v : votes[rep])
      if (v.group == 0) {
        if (!v.cleared.empty()) main_reference[v.scenario] = v.cleared.front();
        else if (!v.against_golden && !v.cannot_tell && v.majority_rank >= 0)
          main_reference[v.scenario] = v.majority_rank;
      }
    std::map<int64_t, std::set<PlantEffect>> planted_effect;  // rank -> the effects seen in this repetition
    for (const auto& v0 : votes[rep]) {
      validate::FleetVote v = v0;
      v.repetition = rep1;
      s.votes.push_back(v);
      const auto& g = groups.at(static_cast<size_t>(v.group));
      if (v.no_majority) ++group_no_majority[g.id];
      for (int64_t o : v.outliers) {
        const validate::FleetRun* own = run_of(rep, o, v.scenario);
        if (!own || own->trajectory_hash.empty()) continue;  // a run that failed: said as such below
        differed.insert(o);
        ++blamed[static_cast<size_t>(o)];
        if (v.against_golden) golden_blame[static_cast<size_t>(o)] = true;
      }
      for (int64_t c : v.cleared) ++cleared[static_cast<size_t>(c)];
      // a side whose runs went non-finite where other ranks' completed is a fault on its own (below): the split it
      // makes is explained; the vote cannot tell only between sides that remain
      size_t finite_sides = 0;
      for (const auto& side : v.sides) {
        const validate::FleetRun* r = run_of(rep, side.ranks.front(), v.scenario);
        finite_sides += r && !ended(*r, RunStatus::NonFinite) ? 1 : 0;
      }
      if (v.cannot_tell && finite_sides >= 2)
        for (int64_t r : g.ranks) {
          if (undecided[static_cast<size_t>(r)]++ > 0) continue;
          std::string sides;
          for (const auto& side : v.sides)
            sides += (sides.empty() ? "" : " | ") + std::string(side.ranks.size() == 1 ? "rank " : "ranks ") +
                     ranks_text(side.ranks);
          first_undecided[static_cast<size_t>(r)] =
              "repetition " + std::to_string(rep1) + ", " + v.scenario + ": its group's ranks split " + sides;
        }
      GoldenTally& t = golden[g.id];
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
      // a rank's plant with no effect: its run is bit for bit the golden's, or an unplanted peer's of its group
      std::set<std::string> good;
      for (const auto& side : v.sides) {
        bool unplanted = side.golden_result == GoldenResult::Identical;
        for (int64_t r : side.ranks) unplanted = unplanted || !planted(r, rep1);
        if (unplanted) good.insert(side.hash);
      }
      for (int64_t r : g.ranks)
        if (planted(r, rep1)) {
          const validate::FleetRun* own = run_of(rep, r, v.scenario);
          if (!own || own->trajectory_hash.empty()) continue;
          planted_effect[r].insert(good.empty()                       ? PlantEffect::Unmeasured
                                   : good.count(own->trajectory_hash) ? PlantEffect::None
                                                                      : PlantEffect::Changed);
        }
      // a run that went non-finite where another rank's completed: a fault whatever its fingerprint or its vote
      bool any_completed = false;
      for (size_t k = 0; k < runs[rep].size(); ++k) {
        const validate::FleetRun* r = run_of(rep, static_cast<int64_t>(k), v.scenario);
        any_completed = any_completed || (r && ended(*r, RunStatus::Completed));
      }
      for (int64_t r : g.ranks) {
        const validate::FleetRun* own = run_of(rep, r, v.scenario);
        if (own && ended(*own, RunStatus::NonFinite) && any_completed) {
          differed.insert(r);
          if (nonfinite[static_cast<size_t>(r)]++ == 0)
            first_nonfinite[static_cast<size_t>(r)] =
                "repetition " + std::to_string(rep1) + ", " + v.scenario + ": its run went non-finite after " +
                plural(own->steps, "step", "steps") + " where other ranks' runs completed";
        }
      }
      // a drift group: its ranks against the main stack's reference run, statistically (the loss at every step)
      const auto ref = main_reference.find(v.scenario);
      if (g.id == 0 || ref == main_reference.end()) continue;
      const validate::FleetRun* main_run = run_of(rep, ref->second, v.scenario);
      if (!main_run || !ended(*main_run, RunStatus::Completed)) continue;
      for (int64_t r : g.ranks) {
        const validate::FleetRun* own = run_of(rep, r, v.scenario);
        if (!own || !ended(*own, RunStatus::Completed)) continue;
        double worst = 0;
        int64_t at = -1;
        const size_t steps = std::min(own->losses.size(), main_run->losses.size());
        for (size_t i = 0; i < steps; ++i) {
          const double a = own->losses[i], b = main_run->losses[i];
          const double d = std::isfinite(a) ? std::abs(a - b) / std::max(std::abs(b), 1e-12)
                                            : std::numeric_limits<double>::infinity();
          if (d > worst || !std::isfinite(d)) {
            worst = d;
            at = static_cast<int64_t>(i);
          }
        }
        auto& dev = deviation[static_cast<size_t>(r)];
        dev = std::max(dev, worst);
        if (worst > validate::kFleetDriftLossTolerance) {
          differed.insert(r);
          if (diverged[static_cast<size_t>(r)]++ == 0) {
            std::ostringstream os;
            os << "repetition " << rep1 << ", " << v.scenario << ": its loss differs from the main stack's (rank "
               << ref->second << ") by " << worst << " (relative) at step " << at << ", beyond "
               << validate::kFleetDriftLossTolerance << " — more than configuration drift moves it";
            first_divergence[static_cast<size_t>(r)] = os.str();
          }
        }
      }
    }
    for (const auto& [r, seen] : planted_effect) {
      ++planted_reps[static_cast<size_t>(r)];
      if (seen.count(PlantEffect::Unmeasured) && !seen.count(PlantEffect::Changed))
        ++unmeasured_reps[static_cast<size_t>(r)];
      else if (!seen.count(PlantEffect::Changed))
        ++unaffected_reps[static_cast<size_t>(r)];
    }
    for (size_t k = 0; k < runs[rep].size(); ++k)
      for (const auto& r : runs[rep][k].runs)
        if (ended(r, RunStatus::Error) && failed_runs[k]++ == 0) first_error[k] = r.scenario + ": " + r.error;
    for (int64_t r : differed) ++disagreements.at(static_cast<size_t>(r));
  }

  // ---- groups
  for (const auto& g : groups) {
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
    const GoldenTally& t = golden[g.id];
    if (t.differs > 0)
      row.goldens = "ranks differ from the " + g.golden_class + " golden in " + plural(t.differs, "vote", "votes") +
                    " (" + t.first_difference + ")" +
                    (t.identical ? "; identical on every rank in " + plural(t.identical, "vote", "votes") : "");
    else if (t.identical > 0)
      row.goldens = "identical to the " + g.golden_class + " goldens (" + plural(t.identical, "vote", "votes") +
                    (t.not_compared ? ", " + std::to_string(t.not_compared) + " without a golden" : "") + ")";
    else
      row.goldens = t.why_not.empty() ? "no golden compared" : t.why_not;
    row.no_majority = group_no_majority[g.id];
    s.groups.push_back(std::move(row));
  }

  // ---- ranks
  for (const auto& id : ids) {
    const auto k = static_cast<size_t>(id.rank);
    FleetRankRow r;
    static_cast<validate::FleetRankPlace&>(r) = id;  // where it runs, as its identity says
    r.group = group_of[id.rank];
    r.repetitions = s.repetitions;
    r.disagreements = disagreements[k];
    r.rate = std::to_string(r.disagreements) + "/" + std::to_string(r.repetitions);
    r.findings = rank_findings[k];
    r.loss_deviation = deviation[k];
    const FleetGroupRow& g = s.groups.at(static_cast<size_t>(r.group));
    const std::string where = "rank " + std::to_string(r.rank) + " (" + r.host + ", " + r.device +
                              (r.gpu_uuid.empty() ? ", " + r.cpu_model : ", " + r.gpu_uuid) +
                              (r.pci_bus.empty() ? "" : ", PCI " + r.pci_bus) + ")";
    const std::string drift =
        g.drift.empty() ? "" : "; its group is configuration drift from the main stack (" + g.drift + ")";
    std::string every;  // every finding of the rank
    for (const auto& f : r.findings)
      every += "; repetition " + std::to_string(f.repetition) + ", " + f.scenario + ", against " +
               (f.against.empty() ? "the majority (rank " + std::to_string(f.majority_rank) + ")" : f.against) + ": " +
               f.difference + "; replayed: " + (f.replay.empty() ? "-" : f.replay) +
               (f.replay_message.empty() ? "" : " (" + f.replay_message + ")");
    if (failed_runs[k] > 0) {
      r.status = FleetRankStatus::RunFailed;
      r.message = where + ": a run failed in " + plural(failed_runs[k], "case", "cases") + " (" + first_error[k] + ")";
    } else if (blamed[k] > 0 && golden_blame[k]) {
      r.status = FleetRankStatus::DiffersFromGolden;
      r.message = where + " differs from the " + r.golden_class + " golden in " + r.rate + " repetition(s)" +
                  (cleared[k] ? " (identical to it in " + plural(cleared[k], "vote", "votes") + ")" : "") +
                  (nonfinite[k] ? "; " + first_nonfinite[k] : "") + every;
    } else if (blamed[k] > 0) {
      r.status = FleetRankStatus::Outlier;
      r.message = where + " differs from its group's majority in " + r.rate + " repetition(s)" +
                  (nonfinite[k] ? "; " + first_nonfinite[k] : "") + every;
    } else if (nonfinite[k] > 0) {
      r.status = FleetRankStatus::NonFinite;
      r.message = where + ": a fault whatever its fingerprint — " + first_nonfinite[k] + " (" +
                  plural(nonfinite[k], "case", "cases") + ")" + drift + every;
    } else if (diverged[k] > 0) {
      r.status = FleetRankStatus::Diverges;
      r.message =
          where + ": compared with the main stack statistically (no peer of its stack), " + first_divergence[k] + drift;
    } else if (undecided[k] > 0) {
      r.status = FleetRankStatus::CannotTell;
      r.message = where + ": cannot tell which side is wrong — " + first_undecided[k] +
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
          (cleared[k] ? " is bit for bit the " + r.golden_class + " golden's in " +
                            plural(cleared[k], "vote", "votes") + " (cleared by the golden)"
                      : " agrees with its group's majority in " + plural(r.repetitions, "repetition", "repetitions")) +
          drift;
      if (r.loss_deviation >= 0) {
        std::ostringstream os;
        os << "; compared with the main stack statistically: largest relative loss difference " << r.loss_deviation
           << " (tolerance " << validate::kFleetDriftLossTolerance << ")";
        r.message += os.str();
      }
    }
    if (planted_reps[k] > 0 && unaffected_reps[k] == planted_reps[k]) {
      const std::string text = "rank " + std::to_string(r.rank) + ": " + r.plants;
      s.plants_without_effect.push_back(text);
      r.message += "; its plant (" + r.plants + ") had no measurable effect: its runs are bit for bit " +
                   (cleared[k] ? "the golden's" : "its unplanted peers'") + " in " +
                   plural(planted_reps[k], "planted repetition", "planted repetitions");
    } else if (planted_reps[k] > 0 && unmeasured_reps[k] > 0 && r.status == FleetRankStatus::Agrees)
      r.message += "; its plant (" + r.plants +
                   ")'s effect cannot be measured: no unplanted peer of its stack and no golden to compare with";
    r.pass = r.status == FleetRankStatus::Agrees;
    s.ranks.push_back(std::move(r));
  }

  // ---- groups' results and the verdict
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
  s.pass = failing == 0 && !s.ranks.empty();
  std::string drift;
  for (const auto& g : s.groups)
    if (!g.drift.empty())
      drift += (drift.empty() ? "" : "; ") + std::string(g.ranks.size() == 1 ? "rank " : "ranks ") +
               ranks_text(g.ranks) + ": " + g.drift;
  if (s.pass) {
    s.verdict = "PASS: every rank agrees with its group's majority" +
                std::string(s.repetitions > 1 ? " in every repetition" : "") + " and with the goldens compared";
  } else {
    // the ranks by what was found, blame first; "cannot tell" names no one
    const std::vector<std::pair<FleetRankStatus, std::string>> order = {
        {FleetRankStatus::DiffersFromGolden, "the golden outranks the majority: blamed"},
        {FleetRankStatus::Outlier,
         "outliers of a majority of " + std::to_string(validate::kFleetMinMajority) + "+ ranks"},
        {FleetRankStatus::NonFinite, "non-finite (a fault whatever the fingerprint)"},
        {FleetRankStatus::Diverges, "diverges from the main stack (statistical)"},
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
    s.verdict = "FAIL: " + plural(failing, "rank", "ranks") + " of " + std::to_string(s.world_size) + " — " + parts +
                (ok.empty() ? "" : "; passing: " + std::string(ok.size() == 1 ? "rank " : "ranks ") + ranks_text(ok));
  }
  if (!drift.empty()) s.verdict += "; configuration drift (separate groups, nobody called corrupt): " + drift;
  if (!s.plants_without_effect.empty()) {
    std::string ps;
    for (const auto& p : s.plants_without_effect) ps += (ps.empty() ? "" : "; ") + p;
    s.verdict += "; plants with no measurable effect: " + ps;
  }
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
