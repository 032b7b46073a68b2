// Localization by bisection over the model's parameterised leaves (localize.h).
#include "usecases/localize.h"

#include <algorithm>
#include <cmath>

namespace ampcheck::usecases {

namespace {

bool is_child(const std::string& child, const std::string& parent) {
  if (parent.empty()) return !child.empty();
  return child.size() > parent.size() && child.compare(0, parent.size(), parent) == 0 && child[parent.size()] == '.';
}

std::string joined(const std::vector<std::string>& xs) {
  std::string s;
  for (const auto& x : xs) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> candidate_leaves(const std::vector<ModuleInfo>& tree) {
  std::vector<std::string> leaves;
  for (const auto& m : tree) {
    if (m.name.empty() || m.parameters <= 0) continue;
    const bool has_child =
        std::any_of(tree.begin(), tree.end(), [&](const ModuleInfo& o) { return is_child(o.name, m.name); });
    if (!has_child) leaves.push_back(m.name);
  }
  return leaves;
}

std::string common_parent(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  if (names.size() == 1) {
    const auto dot = names[0].rfind('.');
    return dot == std::string::npos ? "" : names[0].substr(0, dot);
  }
  std::string prefix = names[0];
  for (const auto& n : names) {
    while (!prefix.empty() && !(n == prefix || is_child(n, prefix))) {
      const auto dot = prefix.rfind('.');
      prefix = dot == std::string::npos ? "" : prefix.substr(0, dot);
    }
  }
  return prefix;
}

namespace {

// Adaptive group testing: the culprits within `set`, given that keeping base ∪ set tracks. A half that tracks alone
// (with base) holds them all; when neither does, both hold some: each is searched with the other kept. Throws
// TooMany once more than kSmallSet culprits are certain.
struct TooMany {};

class Search {
 public:
  Search(Localization& L, const Probe& probe) : L_(L), probe_(probe) {}

  bool tracks(const std::vector<std::string>& keep) {
    L_.probes.push_back({keep, probe_(keep)});
    return L_.probes.back().outcome.tracks;
  }

  std::vector<std::string> find(const std::vector<std::string>& set, const std::vector<std::string>& base) {
    if (set.size() == 1) return set;
    const auto mid = set.begin() + static_cast<std::ptrdiff_t>(set.size() / 2);
    const std::vector<std::string> a(set.begin(), mid), b(mid, set.end());
    if (tracks(with(base, a))) return find(a, base);
    if (tracks(with(base, b))) return find(b, base);
    if (++certain_ > kSmallSet) throw TooMany{};  // one more culprit is certain: one in each half
    const auto in_a = find(a, with(base, b));
    const auto in_b = find(b, with(base, in_a));
    return with(in_a, in_b);
  }

  size_t certain() const { return certain_; }

 private:
  static std::vector<std::string> with(std::vector<std::string> x, const std::vector<std::string>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  }
  Localization& L_;
  const Probe& probe_;
  size_t certain_ = 1;
};

}  // namespace

Localization localize(const std::vector<ModuleInfo>& tree, const Probe& probe) {
  Localization L;
  const std::vector<std::string> leaves = candidate_leaves(tree);
  if (leaves.empty()) {
    L.message = "the recording lists no modules with parameters: nothing to bisect";
    return L;
  }
  Search search(L, probe);
  // 1. every candidate in FP32
  if (!search.tracks(leaves)) {
    L.message = "keeping every module with parameters (" + std::to_string(leaves.size()) +
                ") in FP32 does not make it track (" + L.probes.back().outcome.verdict +
                "): the cause is not in one module's compute — e.g. updates lost on low-precision weights, the loss, "
                "or operations between modules";
    return L;
  }
  // 2. the culprits among them
  try {
    L.modules = search.find(leaves, {});
  } catch (const TooMany&) {
    L.message = "no small set of modules: more than " + std::to_string(kSmallSet) + " of the " +
                std::to_string(leaves.size()) +
                " modules must be kept in FP32 for it to track — the cause is spread over the model (e.g. updates lost "
                "in every parameter); " +
                std::to_string(L.probes.size()) + " probe runs";
    return L;
  }
  L.found = true;
  L.parent = common_parent(L.modules);
  L.message = "keep " + joined(L.modules) + " in FP32" + (L.parent.empty() ? "" : " (in " + L.parent + ")") +
              ": found in " + std::to_string(L.probes.size()) + " probe runs";
  return L;
}

int64_t probe_length(int64_t run_steps, int64_t first_divergence_step, int64_t requested) {
  const int64_t steps = requested > 0 ? requested
                        : run_steps <= 100 || first_divergence_step < 0
                            ? run_steps
                            : std::max<int64_t>(100, first_divergence_step + first_divergence_step / 4 + 1);
  return std::min(steps, run_steps);
}

std::string fix_without_modules(const std::string& strategy) {
  if (strategy.find("pure") == std::string::npos) return "";
  return "fix: fp32 master weights — keep the parameters in FP32 and compute in low precision (bf16-autocast), or an "
         "optimizer that keeps fp32 master copies; a bf16 weight cannot take an update smaller than 2^-8 of its value";
}

}  // namespace ampcheck::usecases
