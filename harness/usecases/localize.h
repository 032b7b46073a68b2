// Localization: which modules' precision makes a failing strategy fail. A bisection over the model's parameterised
// leaf modules (in the order the model lists them): each probe is a short run with a chosen set of modules kept in
// FP32 (autocast off inside them, their inputs cast up; under pure bf16 / fp16 their parameters kept fp32), judged
// against the same reference. Shared by `ampcheck sweep --localize` (the user's script) and `ampcheck localize`
// (the engine's scenarios): they differ only in how a probe is run.
//
//   1. keep every candidate leaf in FP32: if that does not track, no set of modules can be named (the cause lies
//      outside the modules' compute — the optimizer's update on low-precision weights, the loss — or in operations
//      between modules); the result says so and names the fix where it is known.
//   2. halve the candidates: keep the first half; if it tracks, the cause is there; else keep the second half; if
//      neither half alone tracks, each half holds a cause: each is searched with the other kept (adaptive group
//      testing). More than kSmallSet modules certain to be needed: "no small set", said so.
//   3. the leaves found are named, with their nearest common parent; one cause costs at most 2·ceil(log2(leaves)) + 1
//      probes.
#pragma once

#include "report/summary.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ampcheck::usecases {

struct ModuleInfo {
  std::string name;        // dotted, as named_modules() names it ("transformer.h.1.attn.c_proj"; "" the root)
  int64_t parameters = 0;  // parameters it holds, its children's included
};

// A probe's outcome as judged against the reference.
struct ProbeOutcome {
  bool tracks = false;  // the probe is free of the failure (tracks, or differs only by the strategy's own costs)
  std::string verdict;  // the judged verdict (tracks, diverges, stalls, nonfinite, error)
  std::string message;
  double ms_per_step = 0;         // NaN where unmeasured
  int64_t peak_memory_bytes = 0;  // the probe's peak memory (0 where unmeasured)
  std::string explanation;        // what failed (signal, from which step, skipped steps), or what was discounted
  bool unclear = false;           // neither a fix nor not: a marginal failure moved by less than a placebo can move it
  std::string residue;            // a fix that leaves a marginal difference: what is left (localize.h kPlaceboShift)
};

// A probe's outcome from its judgement (issue 52): `tracks` where judge said tracks, and also where it said diverges
// only through costs of the strategy itself, which the failing run's cause does not explain and a kept module cannot
// remove: a GradScaler's calibration — skipped steps that are all a prefix of the run (steps 0..k-1, the scale
// calibrating down from its initial value; at most half the probe: 9 of a 20-step probe on draw A), or few enough that
// the skipped signal allows them — and, with such skips, gradient / update norms above the reference's while the loss
// signal (skip-aware) tracks (the scaled-gradient reading of the warm-up). A non-finite loss, a loss outside its band,
// stalls, scattered skips, norms below the reference's: not discounted. `skipped_at`: the probe's skipped steps
// (indices).
//
// Against the failing run (`failing`, where given; issue 52's sixth session): a probe is a paired comparison — the
// same run with some modules kept in FP32 — and keeping any module moves a run's margins by up to kPlaceboShift. Let
// M_f be the failing run's largest deciding margin (infinite where it went non-finite) and M_p the probe's (its
// largest deciding margin, fired or not; infinite where non-finite). The probe fixes the failure where
// M_p < M_f - kPlaceboShift and M_p < kMarginalFailure: a probe that still fails by a marginal amount after removing
// a non-marginal failure fixes it with a `residue` (said in the answer: what is left is within what keeping any
// module moves a run by). A marginal failure (M_f < kMarginalFailure) is fixed only by a probe that moves it by more
// than kPlaceboShift; a probe that tracks without that is `unclear` (the search then cannot tell).
ProbeOutcome probe_outcome(const report::ScenarioSummary& judged, const std::vector<int64_t>& skipped_at,
                           const report::ScenarioSummary* failing = nullptr);

// Runs one probe: keep these modules in FP32 (names from the tree), train briefly, judge.
using Probe = std::function<ProbeOutcome(const std::vector<std::string>& keep_fp32)>;

struct ProbeRecord {
  std::vector<std::string> keep_fp32;
  ProbeOutcome outcome;
};

struct Localization {
  bool found = false;                // a small set of modules makes the run track
  std::vector<std::string> modules;  // that set (leaves), when found
  std::string parent;                // their nearest common parent module ("" the root)
  std::vector<ProbeRecord> probes;   // every probe run, in order
  std::string message;               // what was found, or why nothing could be named, in words
};

constexpr size_t kSmallSet = 3;

// `child` is a submodule of `parent` (dotted names; every module is one of the root, "").
bool is_submodule(const std::string& child, const std::string& parent);
// The leaves of the tree that hold parameters, in the tree's order: the candidates.
std::vector<std::string> candidate_leaves(const std::vector<ModuleInfo>& tree);
// The nearest common parent of dotted names ("" when they share none).
std::string common_parent(const std::vector<std::string>& names);

Localization localize(const std::vector<ModuleInfo>& tree, const Probe& probe);

// The search over the module tree (issue 52; `sweep --localize`):
//   1. hypotheses first: the first non-finite module (`first_nonfinite`, where the failing run names one), then its
//      parent and grandparent block, each kept alone; the first that fixes the failure is refined (3.).
//   2. else keep the whole model ("" — every module, its own operations, the loss its forward computes): if that does
//      not fix it, the cause is outside the model's forward (the optimizer's update on low-precision weights, a loss
//      computed outside the model): said so with what failed (the probe's signal, its skipped steps).
//   3. refine a node that fixes it: keep all its children — if that does not fix it, the node's own operations between
//      its children are the cause (an attention block's core: SDPA / softmax; an MLP block's activation): the node is
//      the finest answer, said so; else adaptive group testing over its children (the leaves' bisection of localize),
//      each child found refined in turn with the others kept.
// The answer is the finest set found; at most kMaxTreeProbes probes — then the smallest set a probe showed to fix it
// (fewest parameters kept in FP32), said so.
constexpr size_t kMaxTreeProbes = 24;
Localization localize_tree(const std::vector<ModuleInfo>& tree, const Probe& probe, const std::string& first_nonfinite);

// The fix in the user's script, for a set found: the lines to paste (the same for a plain loop, the HF Trainer and
// Lightning: a wrapper of each module's forward, applied to the model before training) and its measured cost — the
// probe that kept exactly that set against the failing run (ms/step, peak memory), where measured.
std::string fix_in_script(const Localization& L, const report::ScenarioSummary& failing);

// A failure too small to localize: a probe that keeps any module in FP32 changes the run's rounding, which moves a
// signal's margin (deviation / allowed) by as much as a correct run's own deviation — up to 0.335 of the allowance in
// the verdict calibration campaign (docs/TOLERANCE.md) — and a probe compares two such runs (the failing one and the
// probe), so a fix and a placebo differ beyond that noise only where the failure's margin exceeds 1 + 2 x 0.335.
constexpr double kMarginalFailure = 1.67;
// What a probe must move a margin by to be told from a placebo: the two runs' noise, 2 x 0.335.
constexpr double kPlaceboShift = kMarginalFailure - 1;
// What makes the failure marginal, or "": a diverges / stalls verdict (not non-finite) whose every deciding signal
// that fired lies within kMarginalFailure of its allowance. Such a failure is searched with probe_outcome's stricter
// reading (a fix must move it by more than kPlaceboShift); this says so.
std::string marginal_failure(const report::ScenarioSummary& failing);
// The largest deciding margin of a judged run (fired or not; infinite where it went non-finite).
double deciding_margin(const report::ScenarioSummary& judged);

// The module named by a verdict message's "first non-finite: module NAME (forward|backward)" ("" when none).
std::string first_nonfinite_module(const std::string& message);

// A probe's length: `requested` where > 0; else as long as needed to show the failure — the whole run when it is short
// (≤ 100 steps) or fails only as a whole (no first divergence: skipped fraction, stalls), else up to its first
// divergence and a quarter more, never shorter than 100 steps (so a loss scaler's first calibration skips weigh as
// little as in the run itself); never longer than the run.
int64_t probe_length(int64_t run_steps, int64_t first_divergence_step, int64_t requested);

// The fix where no set of modules can be named and the cause is known from the strategy: a pure low-precision strategy
// (its name holds "pure": pure-bf16, bf16-pure, fp16-pure) loses updates on its low-precision weights — fp32 master
// weights. "" otherwise.
std::string fix_without_modules(const std::string& strategy);

}  // namespace ampcheck::usecases
