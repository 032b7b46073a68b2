// The search over the module tree `sweep --localize` runs (localize.h localize_tree): the first non-finite module
// first, a block's own operations named, containers the recording leaves out searched through.
#include "usecases/localize.h"

#include "io/text.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace ampcheck::usecases {

namespace {

std::string parent_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What a block's own operations between its submodules are, by the block's name.
std::string own_operations(const std::string& node) {
  const std::string last = lower(node.substr(node.rfind('.') == std::string::npos ? 0 : node.rfind('.') + 1));
  if (node.empty()) return "the model's own operations (outside its submodules: e.g. the loss its forward computes)";
  if (last.find("attn") != std::string::npos || last.find("attention") != std::string::npos || last == "self")
    return "the attention core of " + node + " (its scores, softmax / SDPA between its projections)";
  if (last.find("mlp") != std::string::npos || last.find("ffn") != std::string::npos ||
      last.find("feed_forward") != std::string::npos || last.find("dense") != std::string::npos ||
      last == "intermediate")
    return "the activation / products of " + node + " (between its projections)";
  return "the own operations of " + node + " (between its submodules: residual adds, activations, scaling)";
}

class TreeSearch {
 public:
  TreeSearch(Localization& L, const std::vector<ModuleInfo>& tree, const Probe& probe)
      : L_(L), tree_(tree), probe_(probe) {}

  struct Budget {};
  struct Unclear {
    std::string why;
  };

  // (a probe that neither fixes the failure nor leaves it — a marginal failure moved by less than a placebo can move
  // it — ends the search: cannot tell)
  bool fixes(std::vector<std::string> keep) {
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    const auto hit = memo_.find(keep);
    if (hit != memo_.end()) return hit->second;
    if (L_.probes.size() >= kMaxTreeProbes) throw Budget{};
    L_.probes.push_back({keep, probe_(keep)});
    const ProbeOutcome& o = L_.probes.back().outcome;
    if (o.unclear)
      throw Unclear{"keeping " + (keep.size() == 1 && keep[0].empty() ? "the whole model" : io::joined(keep)) +
                    " in FP32: " + o.explanation};
    return memo_[keep] = o.tracks;
  }

  // The modules right under `node` in the tree: its descendants with no other module of the tree between them and
  // it. A container the recording leaves out (a ModuleList, never called: keeping it would keep nothing) makes its
  // children its parent's.
  std::vector<std::string> children(const std::string& node) const {
    std::set<std::string> names;
    for (const auto& m : tree_) names.insert(m.name);
    std::vector<std::string> kids;
    for (const auto& m : tree_) {
      if (!is_submodule(m.name, node)) continue;
      bool nearest = true;
      for (std::string p = parent_of(m.name); nearest && p != node && !p.empty(); p = parent_of(p))
        nearest = names.count(p) == 0;
      if (nearest) kids.push_back(m.name);
    }
    return kids;
  }

  // given keep(base ∪ {node}) fixes it: the finest set within node that, with base, does
  std::vector<std::string> refine(const std::string& node, const std::vector<std::string>& base) {
    const auto kids = children(node);
    if (kids.empty()) return {node};
    if (!fixes(with(base, kids))) {
      notes_.push_back("keeping every submodule of " + (node.empty() ? std::string("the model") : node) +
                       " in FP32 does not fix it, keeping " + (node.empty() ? "the model" : node) +
                       " does: the cause is " + own_operations(node));
      return {node};
    }
    std::vector<std::string> found;
    try {
      found = find(kids, base);
    } catch (const TooMany&) {
      notes_.push_back("more than " + std::to_string(kSmallSet) + " submodules of " + node + " are needed");
      return {node};
    }
    std::vector<std::string> current = found;
    for (const auto& c : found) {
      std::vector<std::string> rest = base;
      for (const auto& o : current)
        if (o != c) rest.push_back(o);
      const auto r = refine(c, rest);
      current.erase(std::find(current.begin(), current.end(), c));
      current.insert(current.end(), r.begin(), r.end());
    }
    return current;
  }

  std::vector<std::string> notes_;

  // The set of fewest parameters (kept in FP32) among the probes that fixed it.
  std::vector<std::string> smallest_fix() const {
    std::map<std::string, int64_t> params;
    int64_t total = 0;  // a kept module the tree does not list (the root, where the recording leaves it out) counts
                        // as the whole model
    for (const auto& m : tree_) {
      params[m.name] = m.parameters;
      if (m.name.find('.') == std::string::npos) total += m.name.empty() ? 0 : m.parameters;
    }
    if (params.count("")) total = params.at("");
    std::vector<std::string> best;
    int64_t least = -1;
    for (const auto& [keep, fixed] : memo_) {
      if (!fixed) continue;
      int64_t n = 0;
      for (const auto& k : keep) {
        bool inside = false;  // a module inside another kept one is counted with it
        for (const auto& o : keep) inside = inside || (o != k && is_submodule(k, o));
        if (!inside) n += params.count(k) ? params.at(k) : total;
      }
      if (least < 0 || n < least) least = n, best = keep;
    }
    return best;
  }

 private:
  struct TooMany {};
  std::vector<std::string> find(const std::vector<std::string>& set, const std::vector<std::string>& base) {
    if (set.size() == 1) return set;
    const auto mid = set.begin() + static_cast<std::ptrdiff_t>(set.size() / 2);
    const std::vector<std::string> a(set.begin(), mid), b(mid, set.end());
    if (fixes(with(base, a))) return find(a, base);
    if (fixes(with(base, b))) return find(b, base);
    if (++certain_ > kSmallSet) throw TooMany{};
    const auto in_a = find(a, with(base, b));
    const auto in_b = find(b, with(base, in_a));
    return with(in_a, in_b);
  }
  static std::vector<std::string> with(std::vector<std::string> x, const std::vector<std::string>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  }
  Localization& L_;
  const std::vector<ModuleInfo>& tree_;
  const Probe& probe_;
  std::map<std::vector<std::string>, bool> memo_;
  size_t certain_ = 1;
};

std::string shown(const std::string& node) { return node.empty() ? "the whole model" : node; }

}  // namespace

Localization localize_tree(const std::vector<ModuleInfo>& tree, const Probe& probe,
                           const std::string& first_nonfinite) {
  Localization L;
  if (tree.empty()) {
    L.message = "the recording lists no modules: nothing to search";
    return L;
  }
  TreeSearch search(L, tree, probe);
  std::vector<std::string> hypotheses;
  bool known = false;
  for (const auto& m : tree) known = known || (!first_nonfinite.empty() && m.name == first_nonfinite);
  for (std::string h = first_nonfinite; known && !h.empty() && hypotheses.size() < 3; h = parent_of(h))
    hypotheses.push_back(h);
  std::string start;
  bool have_start = false;
  std::string story;
  std::vector<std::string> found;
  try {
    for (const auto& h : hypotheses) {
      if (search.fixes({h})) {
        start = h;
        have_start = true;
        story = "first hypothesis " + first_nonfinite + " (the first non-finite module)" +
                (h == first_nonfinite
                     ? " fixes it"
                     : ": not alone (" + L.probes.front().outcome.explanation + "); its block " + h + " does");
        break;
      }
    }
    if (!have_start) {
      if (!hypotheses.empty())
        story = "the first non-finite module " + first_nonfinite + " and its blocks kept alone do not fix it (" +
                L.probes.back().outcome.explanation + "); ";
      if (!search.fixes({""})) {
        L.message = story + "keeping the whole model in FP32 does not fix it either (" +
                    L.probes.back().outcome.explanation +
                    "): the cause is outside the model's forward — the optimizer's update on low-precision weights, a "
                    "loss computed outside the model — not a set of modules; " +
                    std::to_string(L.probes.size()) + " probe runs";
        return L;
      }
      story += "the whole model in FP32 fixes it";
      have_start = true;
    }
    found = search.refine(start, {});
  } catch (const TreeSearch::Budget&) {
    L.message = story + "; probe budget (" + std::to_string(kMaxTreeProbes) + ") spent before a set was found";
    if (!have_start) return L;
    found = search.smallest_fix();
    search.notes_.push_back("the probe budget (" + std::to_string(kMaxTreeProbes) +
                            ") was spent before the search ended: the smallest set a probe showed to fix it");
  } catch (const TreeSearch::Unclear& u) {
    L.message = "cannot tell: " + u.why + (story.empty() ? "" : " (" + story + ")") + "; " +
                std::to_string(L.probes.size()) + " probe runs";
    return L;
  }
  L.found = true;
  L.modules = found;
  L.parent = common_parent(found);
  std::string notes;
  for (const auto& n : search.notes_) notes += "; " + n;
  std::vector<std::string> names;
  for (const auto& f : found) names.push_back(shown(f));
  // what the probe that kept exactly this set left: a marginal difference is said
  std::vector<std::string> want = found;
  std::sort(want.begin(), want.end());
  for (const auto& p : L.probes)
    if (p.keep_fp32 == want && p.outcome.tracks && !p.outcome.residue.empty())
      notes += "; with it kept, a marginal difference is left (" + p.outcome.residue +
               "): within what keeping any module in FP32 moves a run by";
  L.message = "keep " + io::joined(names) + " in FP32" + (L.parent.empty() ? "" : " (in " + L.parent + ")") +
              ": found in " + std::to_string(L.probes.size()) + " probe runs (" + story + ")" + notes;
  return L;
}

}  // namespace ampcheck::usecases
