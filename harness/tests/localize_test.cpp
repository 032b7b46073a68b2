// Localization's bisection (usecases/localize.h) on synthetic module trees whose failing cause is planted: a probe
// "tracks" exactly when the kept set covers the planted culprits. Checks what is named and the probe budget the issue
// sets (≤ 2·log2(modules) + 2 probes).
#include "usecases/localize.h"
#include "usecases/recording_outcome.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

using ampcheck::usecases::candidate_leaves;
using ampcheck::usecases::common_parent;
using ampcheck::usecases::localize;
using ampcheck::usecases::ModuleInfo;
using ampcheck::usecases::ProbeOutcome;

namespace {

// A GPT-like tree: wte, wpe, h.<i>.{ln_1, attn.{c_attn, c_proj}, ln_2, mlp.{c_fc, c_proj}}, ln_f, lm_head.
std::vector<ModuleInfo> gpt_tree(int layers) {
  std::vector<ModuleInfo> t = {
      {"", 100}, {"transformer", 90}, {"transformer.wte", 10}, {"transformer.wpe", 5}, {"transformer.h", 70}};
  for (int i = 0; i < layers; ++i) {
    const std::string b = "transformer.h." + std::to_string(i);
    for (const char* m : {"", ".ln_1", ".attn", ".attn.c_attn", ".attn.c_proj", ".attn.attn_dropout", ".ln_2", ".mlp",
                          ".mlp.c_fc", ".mlp.c_proj", ".mlp.act"})
      t.push_back({b + m, std::string(m).find("dropout") != std::string::npos || std::string(m) == ".mlp.act" ? 0 : 3});
  }
  t.push_back({"transformer.ln_f", 1});
  t.push_back({"lm_head", 10});
  return t;
}

ampcheck::usecases::Probe covering(std::set<std::string> culprits) {
  return [culprits](const std::vector<std::string>& keep) {
    ProbeOutcome o;
    o.tracks = std::all_of(culprits.begin(), culprits.end(),
                           [&](const std::string& c) { return std::find(keep.begin(), keep.end(), c) != keep.end(); });
    o.verdict = o.tracks ? "tracks" : "nonfinite";
    return o;
  };
}

}  // namespace

TEST(Localize, CandidatesAreParameterisedLeaves) {
  const auto leaves = candidate_leaves(gpt_tree(2));
  EXPECT_EQ(leaves.size(), 2u + 2 * 6 + 2);  // wte, wpe, 6 per block, ln_f, lm_head (no dropout / act: no params)
  EXPECT_EQ(leaves.front(), "transformer.wte");
  EXPECT_EQ(common_parent({"transformer.h.1.attn.c_proj"}), "transformer.h.1.attn");
  EXPECT_EQ(common_parent({"transformer.h.1.attn.c_proj", "transformer.h.1.mlp.c_fc"}), "transformer.h.1");
  EXPECT_EQ(common_parent({"transformer.wte", "lm_head"}), "");
}

TEST(Localize, NamesEveryPlantedModuleWithinTheProbeBudget) {
  for (int layers : {1, 2, 4, 12}) {
    const auto tree = gpt_tree(layers);
    const double budget = 2 * std::log2(static_cast<double>(tree.size())) + 2;
    for (const auto& culprit : candidate_leaves(tree)) {
      const auto L = localize(tree, covering({culprit}));
      ASSERT_TRUE(L.found) << culprit;
      EXPECT_EQ(L.modules, std::vector<std::string>{culprit});
      EXPECT_LE(static_cast<double>(L.probes.size()), budget) << culprit << " with " << layers << " layers";
    }
  }
}

TEST(Localize, TwoNeighboursAreNamedTogether) {
  const auto tree = gpt_tree(2);
  const auto L = localize(tree, covering({"transformer.h.1.attn.c_proj", "transformer.h.1.ln_2"}));
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_NE(std::find(L.modules.begin(), L.modules.end(), "transformer.h.1.attn.c_proj"), L.modules.end());
  EXPECT_NE(std::find(L.modules.begin(), L.modules.end(), "transformer.h.1.ln_2"), L.modules.end());
  EXPECT_LE(L.modules.size(), ampcheck::usecases::kSmallSet);
}

TEST(Localize, SaysWhenNoSmallSetOrNoModuleExplainsIt) {
  const auto tree = gpt_tree(2);
  // lost updates in every parameter: only keeping everything tracks
  const auto leaves = candidate_leaves(tree);
  const auto spread = localize(tree, covering({leaves.begin(), leaves.end()}));
  EXPECT_FALSE(spread.found);
  EXPECT_NE(spread.message.find("no small set"), std::string::npos) << spread.message;
  // nothing helps (the cause lies outside the modules)
  const auto none = localize(tree, [](const std::vector<std::string>&) { return ProbeOutcome{}; });
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.probes.size(), 1u);
  EXPECT_NE(none.message.find("does not make it track"), std::string::npos) << none.message;
}

// ---- issue 52: the search over the module tree, the first non-finite module first; probe verdicts ----

namespace {

// keeping a module covers a culprit when it is the culprit or one of its ancestors ("" the whole model); a culprit
// that is a block (its own operations between its children, an attention core) is covered only by the block or above
ampcheck::usecases::Probe covering_tree(std::set<std::string> culprits, int* probes) {
  return [culprits, probes](const std::vector<std::string>& keep) {
    ++*probes;
    ProbeOutcome o;
    o.tracks = std::all_of(culprits.begin(), culprits.end(), [&](const std::string& c) {
      return std::any_of(keep.begin(), keep.end(),
                         [&](const std::string& k) { return k.empty() || c == k || c.rfind(k + ".", 0) == 0; });
    });
    o.verdict = o.tracks ? "tracks" : "nonfinite";
    return o;
  };
}

}  // namespace

TEST(LocalizeTree, TheFirstNonfiniteModuleIsTestedFirst) {
  int probes = 0;
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(4), covering_tree({"transformer.h.2.attn.c_proj"}, &probes),
                                                   "transformer.h.2.attn.c_proj");
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_EQ(L.modules, std::vector<std::string>{"transformer.h.2.attn.c_proj"});
  EXPECT_EQ(probes, 1);
}

TEST(LocalizeTree, FindsALeafFromTheWholeModelWithoutAHint) {
  for (const std::string culprit : {"transformer.h.3.mlp.c_fc", "lm_head", "transformer.wte", "transformer.h.0.ln_2"}) {
    int probes = 0;
    const auto L = ampcheck::usecases::localize_tree(gpt_tree(4), covering_tree({culprit}, &probes), "");
    ASSERT_TRUE(L.found) << L.message;
    EXPECT_EQ(L.modules, std::vector<std::string>{culprit}) << L.message;
    EXPECT_LE(probes, static_cast<int>(ampcheck::usecases::kMaxTreeProbes));
  }
}

TEST(LocalizeTree, NamesABlocksOwnOperations) {
  // the attention core of h.1.attn (between its projections), the first non-finite module one of its projections
  int probes = 0;
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(2), covering_tree({"transformer.h.1.attn"}, &probes),
                                                   "transformer.h.1.attn.c_attn");
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_EQ(L.modules, std::vector<std::string>{"transformer.h.1.attn"});
  EXPECT_NE(L.message.find("the attention core of transformer.h.1.attn"), std::string::npos) << L.message;
  EXPECT_LE(probes, 3);
}

TEST(LocalizeTree, AFailedWholeModelProbeIsExplained) {
  int probes = 0;
  auto never = [&](const std::vector<std::string>&) {
    ++probes;
    ProbeOutcome o;
    o.verdict = "diverges";
    o.explanation = "diverges: loss from step 3 (margin 2.1)";
    return o;
  };
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(2), never, "transformer.h.1.mlp.c_fc");
  EXPECT_FALSE(L.found);
  EXPECT_NE(L.message.find("outside the model's forward"), std::string::npos) << L.message;
  EXPECT_NE(L.message.find("loss from step 3"), std::string::npos) << L.message;
  EXPECT_EQ(probes, 4);  // the module, its two blocks, the whole model
}

TEST(LocalizeTree, ProbeVerdictDiscountsTheScalersWarmup) {
  ampcheck::report::ScenarioSummary j;
  j.verdict = "diverges";
  j.steps = 30;
  ampcheck::verdict::SignalComparison loss, grad;
  loss.name = "loss";
  loss.judged = true;
  grad.name = "grad_norm";
  grad.judged = grad.fired = true;
  grad.deviation = 1.6;  // above the reference's
  grad.first_step = 20;
  j.signals = {loss, grad};
  const auto warm = ampcheck::usecases::probe_outcome(j, {0, 1, 2, 3});
  EXPECT_TRUE(warm.tracks) << warm.explanation;
  EXPECT_NE(warm.explanation.find("warm-up"), std::string::npos) << warm.explanation;
  // the same with the loss outside its band, or norms below the reference's (lost updates), or no skips: not discounted
  auto j2 = j;
  j2.signals[0].fired = true;
  EXPECT_FALSE(ampcheck::usecases::probe_outcome(j2, {0, 1, 2, 3}).tracks);
  auto j3 = j;
  j3.signals[1].deviation = -1.6;
  EXPECT_FALSE(ampcheck::usecases::probe_outcome(j3, {0, 1, 2, 3}).tracks);
  EXPECT_FALSE(ampcheck::usecases::probe_outcome(j, {}).tracks);
  // every step skipped is not a warm-up
  j.verdict = "nonfinite";
  EXPECT_FALSE(ampcheck::usecases::probe_outcome(j, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).tracks);
}

TEST(LocalizeTree, SearchesThroughAContainerTheRecordingLeavesOut) {
  // The recorder leaves out containers (a ModuleList is never called: keeping it keeps nothing, as an H100 sweep
  // found — "keep every submodule of model" then kept no layer and the answer blamed model's own operations).
  // Without "transformer.h", the blocks are the children of "transformer": the search reaches the culprit.
  auto tree = gpt_tree(4);
  tree.erase(std::remove_if(tree.begin(), tree.end(), [](const ModuleInfo& m) { return m.name == "transformer.h"; }),
             tree.end());
  int probes = 0;
  const auto L = ampcheck::usecases::localize_tree(tree, covering_tree({"transformer.h.2.mlp.c_fc"}, &probes), "");
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_EQ(L.modules, std::vector<std::string>{"transformer.h.2.mlp.c_fc"}) << L.message;
  EXPECT_EQ(L.message.find("own operations"), std::string::npos) << L.message;
}

TEST(LocalizeTree, AMarginalFailureIsSaidSo) {
  // the H100 bf16 sweep (reports/examples/gpu-h100-sweep-localize): grad norm 1.15x against an allowed 1.11x at the
  // last step — margin 1.34, within the noise a kept module adds to a probe: said so (the search then reads its
  // probes strictly: LocalizeTree.AProbeIsAPairedComparison)
  ampcheck::report::ScenarioSummary j;
  j.verdict = "diverges";
  ampcheck::verdict::SignalComparison grad;
  grad.name = "grad_norm";
  grad.judged = grad.fired = true;
  grad.max_margin = 1.34;
  grad.message = "true grad norm 1.15x the reference's at step 149";
  j.signals = {grad};
  const auto why = ampcheck::usecases::marginal_failure(j);
  EXPECT_EQ(why.rfind("the failure is marginal", 0), 0u) << why;
  EXPECT_NE(why.find("grad_norm at 1.34x"), std::string::npos) << why;
  EXPECT_DOUBLE_EQ(ampcheck::usecases::deciding_margin(j), 1.34);
  // a failure well past the noise, or a non-finite one, is not marginal
  j.signals[0].max_margin = 2.5;
  EXPECT_EQ(ampcheck::usecases::marginal_failure(j), "");
  j.signals[0].max_margin = 1.34;
  j.verdict = "nonfinite";
  EXPECT_EQ(ampcheck::usecases::marginal_failure(j), "");
  EXPECT_TRUE(std::isinf(ampcheck::usecases::deciding_margin(j)));
  // one deciding signal far out is enough
  j.verdict = "diverges";
  auto loss = grad;
  loss.name = "loss";
  loss.max_margin = 4.0;
  j.signals.push_back(loss);
  EXPECT_EQ(ampcheck::usecases::marginal_failure(j), "");
}

namespace {

// A judged run whose one deciding signal (grad_norm) lies at `margin` of its allowance (fired above 1).
ampcheck::report::ScenarioSummary judged_at(double margin) {
  ampcheck::report::ScenarioSummary j;
  j.verdict = margin > 1 ? "diverges" : "tracks";
  j.steps = 20;
  ampcheck::verdict::SignalComparison loss, grad;
  loss.name = "loss";
  loss.judged = true;
  loss.max_margin = 0.1;
  grad.name = "grad_norm";
  grad.judged = true;
  grad.fired = margin > 1;
  grad.max_margin = margin;
  grad.message = "true grad norm below the reference's at step 0";
  j.signals = {loss, grad};
  return j;
}

}  // namespace

TEST(LocalizeTree, AProbeIsAPairedComparison) {
  using ampcheck::usecases::probe_outcome;
  ampcheck::report::ScenarioSummary nonfinite;
  nonfinite.verdict = "nonfinite";
  // a non-finite failure gone but for a marginal difference: a fix, with the residue said
  const auto residue = probe_outcome(judged_at(1.3), {}, &nonfinite);
  EXPECT_TRUE(residue.tracks) << residue.explanation;
  EXPECT_FALSE(residue.unclear);
  EXPECT_NE(residue.residue.find("grad_norm at 1.3x"), std::string::npos) << residue.residue;
  // a difference beyond the marginal bound is still a failure, judged alone or against the failing run
  EXPECT_FALSE(probe_outcome(judged_at(1.8), {}, &nonfinite).tracks);
  EXPECT_FALSE(probe_outcome(judged_at(1.3), {}).tracks);
  // a marginal failure (1.2): a fix must move it by more than kPlaceboShift; tracking by less is neither
  const auto failing = judged_at(1.2);
  const auto fixed = probe_outcome(judged_at(0.3), {}, &failing);
  EXPECT_TRUE(fixed.tracks) << fixed.explanation;
  const auto unclear = probe_outcome(judged_at(0.9), {}, &failing);
  EXPECT_FALSE(unclear.tracks);
  EXPECT_TRUE(unclear.unclear) << unclear.explanation;
  EXPECT_NE(unclear.explanation.find("not counted as a fix"), std::string::npos) << unclear.explanation;
  const auto still = probe_outcome(judged_at(1.15), {}, &failing);
  EXPECT_FALSE(still.tracks);
  EXPECT_FALSE(still.unclear);
}

TEST(LocalizeTree, AnUnclearProbeEndsTheSearchWithCannotTell) {
  int probes = 0;
  auto unclear = [&](const std::vector<std::string>&) {
    ++probes;
    ProbeOutcome o;
    o.verdict = "tracks";
    o.unclear = true;
    o.explanation = "tracks — not counted as a fix: the failure was marginal";
    return o;
  };
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(2), unclear, "transformer.h.1.mlp.c_fc");
  EXPECT_FALSE(L.found);
  EXPECT_EQ(L.message.rfind("cannot tell: keeping transformer.h.1.mlp.c_fc in FP32", 0), 0u) << L.message;
  EXPECT_EQ(probes, 1);
}

TEST(LocalizeTree, AFixLeavingAMarginalDifferenceSaysSo) {
  // the attention block fixes a non-finite failure but for a marginal residue; its projections alone do not
  auto probe = [](const std::vector<std::string>& keep) {
    ProbeOutcome o;
    const bool attn = std::any_of(keep.begin(), keep.end(), [](const std::string& k) {
      return k.empty() || k == "transformer" || k == "transformer.h.1" || k == "transformer.h.1.attn";
    });
    o.tracks = attn;
    o.verdict = attn ? "diverges" : "nonfinite";
    if (attn) o.residue = "grad_norm at 1.3x its allowance";
    return o;
  };
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(2), probe, "transformer.h.1.attn.c_attn");
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_EQ(L.modules, std::vector<std::string>{"transformer.h.1.attn"});
  EXPECT_NE(L.message.find("a marginal difference is left (grad_norm at 1.3x its allowance)"), std::string::npos)
      << L.message;
}

TEST(LocalizeTree, ASpentBudgetAnswersTheSmallestSetShownToFixIt) {
  // three culprits in three layers of a 12-layer model, no hint: the search runs out of probes; the answer is the
  // verified set of fewest parameters, not the whole model it started from
  const std::set<std::string> culprits = {"transformer.h.1.mlp.c_fc", "transformer.h.6.attn.c_proj",
                                          "transformer.h.10.ln_2"};
  int probes = 0;
  const auto L = ampcheck::usecases::localize_tree(gpt_tree(12), covering_tree(culprits, &probes), "");
  ASSERT_TRUE(L.found) << L.message;
  EXPECT_EQ(probes, static_cast<int>(ampcheck::usecases::kMaxTreeProbes)) << L.message;
  EXPECT_NE(L.message.find("probe budget"), std::string::npos) << L.message;
  EXPECT_NE(L.modules, std::vector<std::string>{""}) << L.message;
  for (const auto& c : culprits)  // the answer is a set a probe showed to fix it
    EXPECT_TRUE(std::any_of(L.modules.begin(), L.modules.end(),
                            [&](const std::string& k) { return k.empty() || c == k || c.rfind(k + ".", 0) == 0; }))
        << c << " not covered: " << L.message;
  // a recording that leaves the root out of its table: the whole model still counts as the largest set
  auto rootless = gpt_tree(12);
  rootless.erase(rootless.begin());
  probes = 0;
  const auto R = ampcheck::usecases::localize_tree(rootless, covering_tree(culprits, &probes), "");
  ASSERT_TRUE(R.found) << R.message;
  EXPECT_NE(R.modules, std::vector<std::string>{""}) << R.message;
}

// What a sweep's recording shows, spelled once (sweep.json's "outcome", report.html, the terminal's table).
TEST(LocalizeSweep, RecordingOutcomeWords) {
  using ampcheck::usecases::RecordingOutcome;
  using ampcheck::usecases::to_string;
  EXPECT_EQ(to_string(RecordingOutcome::Judged), "judged");
  EXPECT_EQ(to_string(RecordingOutcome::Partial), "partial");
  EXPECT_EQ(to_string(RecordingOutcome::Error), "error");
  EXPECT_EQ(to_string(RecordingOutcome::Refused), "refused");
  EXPECT_EQ(to_string(RecordingOutcome::NotOptedIn), "not-opted-in");
  EXPECT_EQ(to_string(RecordingOutcome::IgnoredPlan), "ignored-plan");
  EXPECT_EQ(to_string(RecordingOutcome::RecordedNothing), "recorded-nothing");
}
