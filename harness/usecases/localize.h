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
  bool tracks = false;
  std::string verdict;  // the judged verdict (tracks, diverges, stalls, nonfinite, error)
  std::string message;
  double ms_per_step = 0;         // NaN where unmeasured
  int64_t peak_memory_bytes = 0;  // the probe's peak memory (0 where unmeasured)
};

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

// The leaves of the tree that hold parameters, in the tree's order: the candidates.
std::vector<std::string> candidate_leaves(const std::vector<ModuleInfo>& tree);
// The nearest common parent of dotted names ("" when they share none).
std::string common_parent(const std::vector<std::string>& names);

Localization localize(const std::vector<ModuleInfo>& tree, const Probe& probe);

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
