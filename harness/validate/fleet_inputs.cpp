// The same input on every rank of a fleet (fleet.h fleet_input_differences): the options and the scenarios (by name and
// configuration hash) each rank sent in its identity, compared before anything trains. A difference is bad input,
// named by field or scenario and by the ranks on each side.
#include "validate/fleet.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace ampcheck::validate {

namespace {

std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// value -> the ranks holding it, most ranks first (ties: the lowest rank first)
std::vector<std::pair<std::string, std::vector<int64_t>>> sides(const std::map<std::string, std::vector<int64_t>>& by) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out(by.begin(), by.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size() : a.second.front() < b.second.front();
  });
  return out;
}

std::string value_of(const std::vector<FleetKeyValue>& kvs, const std::string& key, const std::string& absent) {
  for (const auto& kv : kvs)
    if (kv.key == key) return kv.value;
  return absent;
}

// "--steps: 12 on ranks 0,2,3; 30 on rank 1" (`what`: "--steps: ")
std::string split_line(const std::string& what, const std::map<std::string, std::vector<int64_t>>& by) {
  std::string s = what;
  bool first = true;
  for (const auto& [value, ranks] : sides(by)) {
    s += (first ? "" : "; ") + (value.empty() ? std::string("(none)") : value) + " on " + ranks_text(ranks);
    first = false;
  }
  return s;
}

std::vector<std::string> tokens(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

}  // namespace

std::vector<std::string> fleet_input_differences(const std::vector<FleetRankIdentity>& ranks) {
  std::vector<std::string> lines;
  // options: every key any rank sent, in the order of the first rank that sent it
  std::vector<std::string> keys;
  for (const auto& r : ranks)
    for (const auto& kv : r.options)
      if (std::find(keys.begin(), keys.end(), kv.key) == keys.end()) keys.push_back(kv.key);
  for (const auto& key : keys) {
    std::map<std::string, std::vector<int64_t>> by;
    for (const auto& r : ranks) by[value_of(r.options, key, "(not sent)")].push_back(r.rank);
    if (by.size() > 1) lines.push_back(split_line(key + ": ", by));
  }
  // scenarios: by name; a name some ranks lack, then a configuration that differs
  std::vector<std::string> names;
  for (const auto& r : ranks)
    for (const auto& kv : r.scenarios)
      if (std::find(names.begin(), names.end(), kv.key) == names.end()) names.push_back(kv.key);
  for (const auto& name : names) {
    std::vector<int64_t> with, without;
    std::map<std::string, std::vector<int64_t>> by;
    for (const auto& r : ranks) {
      const std::string hash = value_of(r.scenarios, name, "");
      (hash.empty() ? without : with).push_back(r.rank);
      if (!hash.empty()) by[hash].push_back(r.rank);
    }
    if (!without.empty())
      lines.push_back("scenario '" + name + "': only on " + ranks_text(with) + " (not on " + ranks_text(without) + ")");
    if (by.size() > 1) lines.push_back(split_line("scenario '" + name + "': configuration ", by));
  }
  return lines;
}

std::vector<std::string> scenarios_configured_apart(const std::vector<FleetRankIdentity>& ranks) {
  std::map<std::string, std::set<std::string>> hashes;
  for (const auto& r : ranks)
    for (const auto& kv : r.scenarios) hashes[kv.key].insert(kv.value);
  std::vector<std::string> out;
  for (const auto& [name, set] : hashes)
    if (set.size() > 1) out.push_back(name);
  return out;
}

std::vector<std::string> configuration_differences(const std::string& scenario, const std::vector<std::string>& texts) {
  std::map<std::string, std::vector<int64_t>> by;
  for (size_t k = 0; k < texts.size(); ++k)
    if (!texts[k].empty()) by[texts[k]].push_back(static_cast<int64_t>(k));
  if (by.size() < 2) return {};
  const auto ordered = sides(by);
  const std::string& main_text = ordered.front().first;
  const int64_t main_rank = ordered.front().second.front();
  const auto main_tokens = tokens(main_text);
  const std::set<std::string> main_set(main_tokens.begin(), main_tokens.end());
  std::vector<std::string> lines;
  for (size_t i = 1; i < ordered.size(); ++i) {
    const auto here = tokens(ordered[i].first);
    const std::set<std::string> here_set(here.begin(), here.end());
    // "lr=0.001 -> lr=0.002": the main side's tokens this side lacks, then this side's own
    std::string gone, added;
    for (const auto& t : main_tokens)
      if (!here_set.count(t)) gone += (gone.empty() ? "" : " ") + t;
    for (const auto& t : here)
      if (!main_set.count(t)) added += (added.empty() ? "" : " ") + t;
    std::string diff = (gone.empty() ? "(nothing)" : gone) + " -> " + (added.empty() ? "(nothing)" : added);
    if (diff.size() > 400) diff = diff.substr(0, 400) + "...";
    lines.push_back("scenario '" + scenario + "': " + ranks_text(ordered[i].second) + " differs from rank " +
                    std::to_string(main_rank) + ": " + diff);
  }
  return lines;
}

}  // namespace ampcheck::validate
