// Localization by bisection over the model's parameterised leaves (localize.h).
#include "usecases/localize.h"

#include "io/text.h"
#include "verdict/kind.h"
#include "verdict/signals.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

namespace ampcheck::usecases {

bool is_submodule(const std::string& child, const std::string& parent) {
  if (parent.empty()) return !child.empty();
  return child.size() > parent.size() && child.compare(0, parent.size(), parent) == 0 && child[parent.size()] == '.';
}

std::vector<std::string> candidate_leaves(const std::vector<ModuleInfo>& tree) {
  std::vector<std::string> leaves;
  for (const auto& m : tree) {
    if (m.name.empty() || m.parameters <= 0) continue;
    const bool has_child =
        std::any_of(tree.begin(), tree.end(), [&](const ModuleInfo& o) { return is_submodule(o.name, m.name); });
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
    while (!prefix.empty() && !(n == prefix || is_submodule(n, prefix))) {
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
  L.message = "keep " + io::joined(L.modules) + " in FP32" + (L.parent.empty() ? "" : " (in " + L.parent + ")") +
              ": found in " + std::to_string(L.probes.size()) + " probe runs";
  return L;
}

// ---- issue 52: probe verdicts that discount the strategy's own costs; the search over the module tree ----

namespace {

std::string steps_list(const std::vector<int64_t>& at) {
  std::string s;
  for (size_t i = 0; i < at.size() && i < 8; ++i) s += (i ? "," : "") + std::to_string(at[i]);
  if (at.size() > 8) s += ",... (" + std::to_string(at.size()) + ")";
  return s;
}

// The skipped steps are a GradScaler's warm-up: steps 0..k-1, nothing skipped after.
bool warmup_prefix(const std::vector<int64_t>& at) {
  for (size_t i = 0; i < at.size(); ++i)
    if (at[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

namespace {

// The probe judged on its own: tracks, or diverges only through the strategy's own warm-up (`discounted`).
ProbeOutcome own_outcome(const report::ScenarioSummary& judged, const std::vector<int64_t>& skipped_at,
                         bool& discounted) {
  ProbeOutcome out;
  out.verdict = judged.verdict;
  out.message = judged.message;
  out.ms_per_step = judged.median_step_ms;
  out.peak_memory_bytes = judged.peak_memory_bytes;
  std::ostringstream why;
  const verdict::SignalComparison* loss = nullptr;
  std::vector<const verdict::SignalComparison*> fired;
  for (const auto& sig : judged.signals) {
    if (sig.name == "loss") loss = &sig;
    if (sig.fired && sig.decides) fired.push_back(&sig);
  }
  for (const auto* sig : fired)
    why << (why.tellp() > 0 ? "; " : "") << sig->name << " from step " << sig->first_step << " (margin "
        << (std::isfinite(sig->max_margin) ? std::to_string(sig->max_margin).substr(0, 5) : "-") << ")";
  if (!skipped_at.empty())
    why << (why.tellp() > 0 ? "; " : "") << skipped_at.size() << " skipped step(s) at " << steps_list(skipped_at)
        << (warmup_prefix(skipped_at) &&
                    skipped_at.size() * 2 <= static_cast<size_t>(std::max<int64_t>(judged.steps, 1))
                ? " (the loss scaler's warm-up)"
                : "");
  out.explanation = judged.verdict + (why.tellp() > 0 ? ": " + why.str() : std::string());
  if (verdict::is(judged.verdict, verdict::Kind::Tracks)) {
    out.tracks = true;
    return out;
  }
  if (!verdict::is(judged.verdict, verdict::Kind::Diverges) || !loss || !loss->judged || loss->fired) return out;
  // diverges: discount the strategy's own warm-up, nothing else
  const int64_t steps = std::max<int64_t>(judged.steps, 1);
  const bool prefix =
      !skipped_at.empty() && warmup_prefix(skipped_at) && static_cast<int64_t>(skipped_at.size()) * 2 <= steps;
  bool skips_fired = false;
  for (const auto* sig : fired) skips_fired = skips_fired || sig->name == "skipped" || sig->name == "nonfinite_grads";
  // the scaler calibrating: skips at the start, or few enough that the skipped signal allows them
  const bool calibrating = !skipped_at.empty() && (prefix || !skips_fired);
  if (!calibrating) return out;
  for (const auto* sig : fired) {
    const bool scaled_up = (sig->name == "grad_norm" || sig->name == "update_norm") && sig->deviation > 0;
    const bool skips = (sig->name == "skipped" || sig->name == "nonfinite_grads") && prefix;
    if (!scaled_up && !skips) return out;
  }
  out.tracks = discounted = true;
  out.explanation +=
      " — discounted: the loss tracks (skip-aware) and every other difference is the loss scaler's "
      "calibration (skips at the start or within the skipped signal's allowance, norms read above the reference's), a "
      "cost of the strategy "
      "itself, not the failure";
  return out;
}

std::string margin_text(double m) {
  if (!std::isfinite(m)) return "non-finite";
  std::ostringstream s;
  s << std::setprecision(3) << m << "x its allowance";
  return s.str();
}

// The signals that fired, with their margins ("grad_norm at 1.3x its allowance (...)").
std::string fired_text(const report::ScenarioSummary& judged) {
  std::string s;
  for (const auto& sig : judged.signals)
    if (sig.fired && sig.decides)
      s += (s.empty() ? "" : "; ") + sig.name + " at " + margin_text(sig.max_margin) +
           (sig.message.empty() ? "" : " (" + sig.message + ")");
  return s.empty() ? judged.verdict : s;
}

}  // namespace

double deciding_margin(const report::ScenarioSummary& judged) {
  if (!verdict::is(judged.verdict, verdict::Kind::Tracks) && !verdict::is(judged.verdict, verdict::Kind::Diverges) &&
      !verdict::is(judged.verdict, verdict::Kind::Stalls))
    return INFINITY;  // non-finite, or not judged at all
  double m = 0;
  for (const auto& sig : judged.signals) {
    if (!sig.judged || !sig.decides) continue;
    if (!std::isfinite(sig.max_margin)) return INFINITY;
    m = std::max(m, sig.max_margin);
  }
  return m;
}

ProbeOutcome probe_outcome(const report::ScenarioSummary& judged, const std::vector<int64_t>& skipped_at,
                           const report::ScenarioSummary* failing) {
  bool discounted = false;
  ProbeOutcome out = own_outcome(judged, skipped_at, discounted);
  if (!failing) return out;
  const double mf = deciding_margin(*failing);
  double mp = deciding_margin(judged);
  if (discounted)  // the strategy's own warm-up is not the failure: the loss decides the probe's margin
    for (const auto& sig : judged.signals)
      if (sig.name == "loss") mp = sig.max_margin;
  std::ostringstream shift;
  shift << kPlaceboShift;
  if (mp < kMarginalFailure && mp < mf - kPlaceboShift) {
    if (!out.tracks) {
      out.tracks = true;
      out.residue = fired_text(judged);
      out.explanation += " — counted as a fix: the failure (" + margin_text(mf) +
                         ") is gone but for a marginal difference (" + margin_text(mp) +
                         "), within what keeping any module in FP32 moves a run by";
    }
    return out;
  }
  if (out.tracks && mf < kMarginalFailure) {
    out.tracks = false;
    out.unclear = true;
    out.explanation += " — not counted as a fix: the failure was marginal (" + margin_text(mf) +
                       ") and the probe moved it only to " + margin_text(mp) + ", by less than " + shift.str() +
                       " (what keeping any module in FP32 can move a run by)";
  }
  return out;
}

std::string fix_in_script(const Localization& L, const report::ScenarioSummary& failing) {
  std::string names;
  for (const auto& m : L.modules) names += (names.empty() ? "\"" : ", \"") + m + "\"";
  std::ostringstream s;
  s << "fix (plain loop, HF Trainer, Lightning alike: before training, on the model you pass them): "
       "`for name in ["
    << names
    << "]: ampcheck.keep_fp32(model, name)` — or, without ampcheck, wrap each module's forward in "
       "`torch.autocast(device_type, enabled=False)` with its floating inputs cast to float32 (docs/USING.md, "
       "\"Keeping modules in FP32\")";
  std::vector<std::string> want = L.modules;
  std::sort(want.begin(), want.end());
  for (const auto& p : L.probes) {
    auto kept = p.keep_fp32;
    std::sort(kept.begin(), kept.end());
    if (kept != want || !p.outcome.tracks) continue;
    if (std::isfinite(p.outcome.ms_per_step) && p.outcome.ms_per_step > 0 && std::isfinite(failing.median_step_ms))
      s << "; its cost, measured by the probe that kept exactly that: " << p.outcome.ms_per_step << " vs "
        << failing.median_step_ms << " ms/step";
    if (p.outcome.peak_memory_bytes > 0 && failing.peak_memory_bytes > 0)
      s << ", peak memory " << p.outcome.peak_memory_bytes / 1048576.0 << " vs "
        << failing.peak_memory_bytes / 1048576.0 << " MiB";
    break;
  }
  return s.str();
}

std::string marginal_failure(const report::ScenarioSummary& failing) {
  if (!verdict::is(failing.verdict, verdict::Kind::Diverges) && !verdict::is(failing.verdict, verdict::Kind::Stalls))
    return "";
  const verdict::SignalComparison* largest = nullptr;
  for (const auto& sig : failing.signals) {
    if (!sig.fired || !sig.decides) continue;
    if (!std::isfinite(sig.max_margin) || sig.max_margin >= kMarginalFailure) return "";
    if (!largest || sig.max_margin > largest->max_margin) largest = &sig;
  }
  if (!largest) return "";
  std::ostringstream s;
  s << "the failure is marginal — " << largest->name << " at " << std::setprecision(3) << largest->max_margin
    << "x its allowance (" << largest->message << "), below " << kMarginalFailure
    << "x: keeping any module in FP32 moves a run by up to a third of the allowance, so a probe counts as a fix only "
       "where it moves the failure by more than "
    << kPlaceboShift << " of the allowance";
  return s.str();
}

std::string first_nonfinite_module(const std::string& message) {
  const std::string key = "first non-finite: module ";
  const auto at = message.find(key);
  if (at == std::string::npos) return "";
  const auto start = at + key.size();
  const auto end = message.find(" (", start);
  if (end == std::string::npos) return "";
  const std::string name = message.substr(start, end - start);
  return name == "(the model)" ? "" : name;
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
