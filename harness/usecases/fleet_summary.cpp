// The fleet's summary from what every rank gathered (fleet_report.h summarize_fleet): per rank its status over the
// repetitions (agrees, outlier k/N with its findings, no majority, run failed, its group differs from the golden), per
// group its drift from the main group and its goldens, and the verdict in one sentence. Pure: every rank computes
// the same summary, and so the same exit code.
#include "usecases/fleet_report.h"

#include <algorithm>
#include <map>
#include <set>

namespace ampcheck::usecases {

namespace {

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s;
  for (int64_t r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

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

  // ---- per rank, over the repetitions
  std::vector<int64_t> disagreements(ids.size(), 0), failed_runs(ids.size(), 0);
  std::vector<std::string> first_error(ids.size());
  std::vector<bool> no_majority(ids.size(), false);
  std::vector<std::vector<validate::FleetFinding>> rank_findings(ids.size());
  std::map<int64_t, GoldenTally> golden;  // by group
  std::map<int64_t, int64_t> group_no_majority;
  for (size_t rep = 0; rep < runs.size(); ++rep) {
    std::set<int64_t> differed;
    for (const auto& f : findings[rep]) {
      differed.insert(f.rank);
      rank_findings.at(static_cast<size_t>(f.rank)).push_back(f);
    }
    for (const auto& v : votes[rep]) {
      for (int64_t o : v.outliers) differed.insert(o);
      const auto& g = groups.at(static_cast<size_t>(v.group));
      if (v.no_majority) {
        ++group_no_majority[g.id];
        for (int64_t r : g.ranks) no_majority[static_cast<size_t>(r)] = true;
        continue;
      }
      GoldenTally& t = golden[g.id];
      if (v.golden_result == "identical") ++t.identical;
      else if (v.golden_result == "differs") {
        if (t.differs++ == 0) t.first_difference = v.scenario + ": " + v.golden_message;
      } else if (++t.not_compared == 1)
        t.why_not = v.golden_message;
    }
    for (size_t k = 0; k < runs[rep].size(); ++k)
      for (const auto& r : runs[rep][k].runs)
        if (r.status == "error" && failed_runs[k]++ == 0) first_error[k] = r.scenario + ": " + r.error;
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
      row.goldens = "the majority differs from the " + g.golden_class + " golden in " +
                    plural(t.differs, "vote", "votes") + " (" + t.first_difference + ")";
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
    const FleetGroupRow& g = s.groups.at(static_cast<size_t>(r.group));
    const std::string where = "rank " + std::to_string(r.rank) + " (" + r.host + ", " + r.device +
                              (r.gpu_uuid.empty() ? ", " + r.cpu_model : ", " + r.gpu_uuid) +
                              (r.pci_bus.empty() ? "" : ", PCI " + r.pci_bus) + ")";
    if (failed_runs[k] > 0) {
      r.status = "run failed";
      r.message = where + ": a run failed in " + plural(failed_runs[k], "case", "cases") + " (" + first_error[k] + ")";
    } else if (r.disagreements > 0) {
      r.status = "outlier";
      const auto& f = r.findings.empty() ? validate::FleetFinding{} : r.findings.front();
      r.message = where + " differs from its group's majority in " + r.rate + " repetition(s)" +
                  (r.findings.empty()
                       ? ""
                       : ": repetition " + std::to_string(f.repetition) + ", " + f.scenario + ", " + f.difference +
                             "; replayed: " + (f.replay.empty() ? "-" : f.replay) + " (" + f.replay_message + ")");
    } else if (no_majority[k]) {
      r.status = "no majority";
      r.message = where + ": its group (ranks " + ranks_text(g.ranks) +
                  ") has no majority in some vote — the ranks disagree and there is no telling who is wrong. HINT: "
                  "run with more ranks of this stack, or against a golden of class " +
                  r.golden_class;
    } else if (g.goldens.rfind("the majority differs", 0) == 0) {
      r.status = "group differs from its golden";
      r.message = where + " agrees with its group, and " + g.goldens;
    } else {
      r.status = "agrees";
      r.message = where + " agrees with its group's majority in " + plural(r.repetitions, "repetition", "repetitions");
      if (!g.drift.empty()) r.message += "; its group is configuration drift from the main stack (" + g.drift + ")";
    }
    r.pass = r.status == "agrees";
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
  s.verdict =
      s.pass ? "PASS: every rank agrees with its group's majority" +
                   std::string(s.repetitions > 1 ? " in every repetition" : "") + " and with the goldens compared"
             : "FAIL: " + plural(failing, "rank", "ranks") + " of " + std::to_string(s.world_size) +
                   (failing == 1 ? " does not agree with its" : " do not agree with their") + " group or its goldens";
  if (!drift.empty()) s.verdict += "; configuration drift (separate groups, nobody called corrupt): " + drift;
  return s;
}

void mark_stopped(FleetSummary& s, const std::vector<std::pair<int64_t, std::string>>& lost, const std::string& why) {
  s.stopped = why;
  s.pass = false;
  for (const auto& [rank, message] : lost) {
    s.lost_ranks.push_back(rank);
    if (rank < 0 || static_cast<size_t>(rank) >= s.ranks.size()) continue;
    FleetRankRow& r = s.ranks[static_cast<size_t>(rank)];
    r.status = "lost";
    r.pass = false;
    r.message = message;
    for (auto& g : s.groups)
      if (std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end()) g.pass = false;
  }
  s.verdict = "INCOMPLETE: " + why + ". Of the " + plural(s.repetitions, "repetition", "repetitions") +
              " every rank finished: " + s.verdict;
}

}  // namespace ampcheck::usecases
