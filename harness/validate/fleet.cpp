// The fleet's vote (fleet.h): trajectory hashes, groups by stack fingerprint, the majority within each group.
#include "validate/fleet.h"

#include "io/fnv1a.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ampcheck::validate {

namespace {

void mix(uint64_t& h, const void* data, size_t n) { h = io::fnv1a(h, data, n); }
void mix_u64(uint64_t& h, uint64_t x) { mix(h, &x, sizeof x); }

bool is_cuda(const FleetRankIdentity& r) {
  for (const auto& kv : r.fingerprint)
    if (kv.key == "device_class") return kv.value.rfind("cuda", 0) == 0;
  return false;
}

// The keys of a rank's fingerprint that can change bits, as one comparable text ("key=value\n" each).
std::string bit_key(const FleetRankIdentity& r) {
  std::string s;
  const bool cuda = is_cuda(r);
  for (const auto& kv : r.fingerprint)
    if (changes_bits(kv.key, cuda)) s += kv.key + "=" + kv.value + "\n";
  return s;
}

std::string value_in(const std::vector<FleetKeyValue>& fp, const std::string& key) {
  for (const auto& kv : fp)
    if (kv.key == key) return kv.value;
  return "(absent)";
}

// Appends / reads fixed-size values and length-prefixed strings.
template <class T>
void put(std::string& out, const T& x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof x);
}
struct Reader {
  const std::string& bytes;
  size_t at = 0;
  template <class T>
  T get() {
    if (bytes.size() - at < sizeof(T))
      throw std::runtime_error("a trajectory message of " + std::to_string(bytes.size()) + " bytes ends early");
    T x;
    std::memcpy(&x, bytes.data() + at, sizeof x);
    at += sizeof x;
    return x;
  }
  uint64_t count(uint64_t element_bytes) {  // a count whose elements must fit in what is left
    const auto n = get<uint64_t>();
    if (element_bytes > 0 && n > (bytes.size() - at) / element_bytes)
      throw std::runtime_error("a trajectory message's count " + std::to_string(n) + " is past its length");
    return n;
  }
};

}  // namespace

RankPlant parse_plant_rank(const std::string& text) {
  const std::string expected =
      "expected R[/K]:<plant> — a rank number, optionally /<repetition> (1-based), then a --plant, e.g. "
      "2:bitflip:param:h.0.mlp.c_fc.weight:0:30@10 or 1/3:bitflip:grad:*:0:30@5:transient";
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument("--plant-rank '" + text + "': no rank; " + expected);
  const std::string who = text.substr(0, colon);
  const size_t slash = who.find('/');
  auto number = [&](const std::string& digits, const char* what) {
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("--plant-rank '" + text + "': " + what + " '" + digits + "' is not a whole number; " +
                                  expected);
    return static_cast<int64_t>(std::stoll(digits));
  };
  RankPlant p;
  p.rank = number(who.substr(0, slash), "the rank");
  if (slash != std::string::npos) {
    p.repetition = number(who.substr(slash + 1), "the repetition");
    if (p.repetition < 1)
      throw std::invalid_argument("--plant-rank '" + text + "': repetitions count from 1; " + expected);
  }
  try {
    p.plant = parse_plant(text.substr(colon + 1));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--plant-rank '" + text + "': " + e.what());
  }
  return p;
}

std::string encode_trajectory(const trajectory::Trajectory& t) {
  std::string out;
  put<uint64_t>(out, t.rows.size());
  for (const auto& row : t.rows)
    for (double x : row) put(out, x);
  put<uint64_t>(out, t.digests.tensors.size());
  for (const auto& name : t.digests.tensors) {
    put<uint64_t>(out, name.size());
    out += name;
  }
  for (const auto* m : {&t.digests.grads, &t.digests.params}) {
    put<uint64_t>(out, m->size());
    for (const auto& step : *m) {
      put<uint64_t>(out, step.size());
      for (uint64_t d : step) put(out, d);
    }
  }
  return out;
}

trajectory::Trajectory decode_trajectory(const std::string& bytes) {
  trajectory::Trajectory t;
  Reader r{bytes};
  t.rows.resize(r.count(sizeof(double) * trajectory::kNumColumns));
  for (auto& row : t.rows)
    for (double& x : row) x = r.get<double>();
  t.digests.tensors.resize(r.count(sizeof(uint64_t)));
  for (auto& name : t.digests.tensors) {
    name.resize(r.count(1));
    name.assign(bytes, r.at, name.size());
    r.at += name.size();
  }
  for (auto* m : {&t.digests.grads, &t.digests.params}) {
    m->resize(r.count(sizeof(uint64_t)));
    for (auto& step : *m) {
      step.resize(r.count(sizeof(uint64_t)));
      for (uint64_t& d : step) d = r.get<uint64_t>();
    }
  }
  if (r.at != bytes.size()) throw std::runtime_error("a trajectory message with bytes past its end");
  return t;
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (int64_t r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

std::string trajectory_hash(const trajectory::Trajectory& t) {
  uint64_t h = io::kFnv1aOffset;
  mix_u64(h, static_cast<uint64_t>(t.size()));
  for (const auto& row : t.rows)
    for (int c = 0; c < trajectory::kNumColumns; ++c) {
      if (c == trajectory::kStepTimeMs) continue;  // never the same twice: compare_bitwise skips it too
      uint64_t bits = 0;
      std::memcpy(&bits, &row[c], sizeof bits);
      mix_u64(h, bits);
    }
  for (const auto& name : t.digests.tensors) mix(h, name.data(), name.size() + 1);  // with its NUL: names apart
  for (const auto* m : {&t.digests.grads, &t.digests.params})
    for (const auto& step : *m)
      for (uint64_t d : step) mix_u64(h, d);
  std::ostringstream os;
  os << std::hex << h;
  return os.str();
}

std::vector<FleetGroup> group_by_fingerprint(const std::vector<FleetRankIdentity>& ranks) {
  std::map<std::string, std::vector<int64_t>> by_key;  // ranks listed in rank order
  for (const auto& r : ranks) by_key[bit_key(r)].push_back(r.rank);
  std::vector<FleetGroup> groups;
  for (auto& [key, members] : by_key) {
    FleetGroup g;
    g.ranks = members;
    groups.push_back(std::move(g));
  }
  std::sort(groups.begin(), groups.end(), [](const FleetGroup& a, const FleetGroup& b) {
    return a.ranks.size() != b.ranks.size() ? a.ranks.size() > b.ranks.size() : a.ranks.front() < b.ranks.front();
  });
  auto identity = [&](int64_t rank) -> const FleetRankIdentity& {
    for (const auto& r : ranks)
      if (r.rank == rank) return r;
    return ranks.front();  // unreachable: every group's rank came from `ranks`
  };
  const FleetRankIdentity& main = identity(groups.front().ranks.front());
  for (size_t i = 0; i < groups.size(); ++i) {
    FleetGroup& g = groups[i];
    g.id = static_cast<int64_t>(i);
    const FleetRankIdentity& first = identity(g.ranks.front());
    g.golden_class = first.golden_class;
    const bool cuda = is_cuda(first);
    if (i > 0) {  // drift: the keys that change bits and differ from the main group's, either side's
      std::set<std::string> keys;
      for (const auto* fp : {&first.fingerprint, &main.fingerprint})
        for (const auto& kv : *fp)
          if (changes_bits(kv.key, cuda)) keys.insert(kv.key);
      std::ostringstream os;
      for (const auto& key : keys) {
        const std::string here = value_in(first.fingerprint, key), there = value_in(main.fingerprint, key);
        if (here == there) continue;
        g.drift.push_back({key, here});
        os << (g.drift.size() > 1 ? "; " : "") << key << ": " << (there.empty() ? "(none)" : there) << " -> "
           << (here.empty() ? "(none)" : here);
      }
      g.drift_description = os.str();
    }
    std::set<std::string> varying;  // keys that do not change bits, differing within the group (drivers, NCCL)
    for (int64_t rank : g.ranks)
      for (const auto& kv : identity(rank).fingerprint)
        if (!changes_bits(kv.key, cuda) && value_in(first.fingerprint, kv.key) != kv.value) varying.insert(kv.key);
    g.varying_keys.assign(varying.begin(), varying.end());
  }
  return groups;
}

std::vector<FleetVote> vote(const std::vector<FleetGroup>& groups, const std::vector<FleetRuns>& runs) {
  std::vector<FleetVote> votes;
  if (runs.empty()) return votes;
  // rank k's run of `name`, paired by name (never by position: a rank's scenarios are its own checkout's)
  auto run_of = [&](int64_t rank, const std::string& name) -> const FleetRun* {
    if (rank < 0 || static_cast<size_t>(rank) >= runs.size()) return nullptr;
    for (const auto& r : runs[static_cast<size_t>(rank)].runs)
      if (r.scenario == name) return &r;
    return nullptr;
  };
  auto has = [](const std::vector<int64_t>& xs, int64_t x) { return std::find(xs.begin(), xs.end(), x) != xs.end(); };
  for (const auto& g : groups)
    for (const auto& first : runs.front().runs) {
      FleetVote v;
      v.group = g.id;
      v.scenario = first.scenario;
      std::map<std::string, std::vector<int64_t>> holders;  // hash -> ranks (a rank without a run holds none)
      std::map<std::string, GoldenResult> golden_of;        // hash -> its ranks' golden result (the same bits)
      bool golden_compared = false;
      for (int64_t rank : g.ranks) {
        const FleetRun* own = run_of(rank, v.scenario);
        if (!own || own->trajectory_hash.empty()) continue;
        holders[own->trajectory_hash].push_back(rank);
        if (own->golden_result != GoldenResult::NotCompared) {
          golden_compared = true;
          golden_of[own->trajectory_hash] = own->golden_result;
          if (v.golden.empty()) v.golden = own->golden;
        }
      }
      for (const auto& [hash, who] : holders) {
        v.sides.push_back({hash, who, golden_of.count(hash) ? golden_of[hash] : GoldenResult::NotCompared});
        if (2 * who.size() > g.ranks.size()) {  // more than half of the group's ranks
          v.majority_hash = hash;
          v.majority = who;
          v.majority_rank = who.front();
        }
      }
      std::stable_sort(v.sides.begin(), v.sides.end(),
                       [](const FleetSide& a, const FleetSide& b) { return a.ranks.size() > b.ranks.size(); });
      if (golden_compared) {
        // goldens outrank the majority: identical to it -> cleared; differing from it -> an outlier
        v.against_golden = true;
        std::string identical_hash;
        for (const auto& side : v.sides)
          if (side.golden_result == GoldenResult::Identical) identical_hash = side.hash;
        for (int64_t rank : g.ranks) {
          const FleetRun* own = run_of(rank, v.scenario);
          const bool identical =
              own && !own->trajectory_hash.empty() &&
              (own->golden_result == GoldenResult::Identical ||
               (own->golden_result == GoldenResult::NotCompared && own->trajectory_hash == identical_hash));
          (identical ? v.cleared : v.outliers).push_back(rank);
        }
        const FleetRun* rep = v.cleared.empty() ? nullptr : run_of(v.cleared.front(), v.scenario);
        if (!rep && !v.majority.empty()) rep = run_of(v.majority_rank, v.scenario);
        if (!rep && !v.sides.empty()) rep = run_of(v.sides.front().ranks.front(), v.scenario);
        if (rep) {
          v.golden_result =
              rep->golden_result == GoldenResult::NotCompared ? GoldenResult::Identical : rep->golden_result;
          v.golden_message = rep->golden_message;
        }
        v.no_majority = v.majority_hash.empty() && g.ranks.size() >= 2;
      } else if (v.majority_hash.empty()) {
        // one rank alone holds its own majority (unless its run failed); two or more that split cannot tell
        v.no_majority = g.ranks.size() >= 2;
        v.cannot_tell = v.sides.size() >= 2;
        if (!v.cannot_tell)  // one hash (or none) and ranks without a run: those are outliers of a run that failed
          for (int64_t rank : g.ranks)
            if (v.sides.empty() || !has(v.sides.front().ranks, rank)) v.outliers.push_back(rank);
        if (const FleetRun* any = v.sides.empty() ? nullptr : run_of(v.sides.front().ranks.front(), v.scenario))
          v.golden_message = any->golden_message;
      } else {
        for (int64_t rank : g.ranks)
          if (!has(v.majority, rank)) v.outliers.push_back(rank);
        // ranks holding another hash (not a failed run): the majority names them only where it is large enough
        if (v.sides.size() >= 2 && static_cast<int64_t>(v.majority.size()) < kFleetMinMajority) {
          v.cannot_tell = true;
          v.outliers.clear();
          for (int64_t rank : g.ranks) {
            const FleetRun* own = run_of(rank, v.scenario);
            if (!own || own->trajectory_hash.empty()) v.outliers.push_back(rank);
          }
        }
        const FleetRun* rep = run_of(v.majority_rank, v.scenario);  // it holds the majority's hash: it has the run
        v.golden = rep->golden;
        v.golden_result = rep->golden_result;
        v.golden_message = rep->golden_message;
      }
      votes.push_back(std::move(v));
    }
  return votes;
}

std::vector<const FleetVote*> votes_to_settle(const std::vector<FleetVote>& votes) {
  std::vector<const FleetVote*> out;
  for (const auto& v : votes)
    if (!v.outliers.empty() && (v.against_golden || v.majority_rank >= 0)) out.push_back(&v);
  return out;
}

}  // namespace ampcheck::validate
