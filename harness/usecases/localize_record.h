// localize.json's record (internal to usecases: localize_scenarios.cpp fills it from the LocalizeResult and writes it):
// every scenario's localization, its probes and what keeping the set costs, as a reader of the file sees it —
// described once by `visit_fields` (io/record_json.h), written in that order (ordered_json). The fields:
// docs/USING.md "ampcheck localize"; CTest cpu.localize and scenarios/localize/campaign.py read them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// One probe run: the modules it kept in FP32, its verdict and measurements.
struct LocalizeProbeRecord {
  std::vector<std::string> keep_fp32;
  std::string verdict;
  bool tracks = false;
  double ms_per_step = NAN;  // null: unmeasured
  int64_t peak_memory_bytes = 0;
};

// What keeping the found set costs: the probe that kept exactly the set against the failing run.
struct LocalizeCostRecord {
  double kept_ms_per_step = NAN, failing_ms_per_step = NAN;  // null: unmeasured
  int64_t kept_peak_memory_bytes = 0, failing_peak_memory_bytes = 0;
  bool measured_by_extra_probe = false;  // that probe was run after the search, only to measure it
};

struct LocalizeScenarioRecord {
  std::string scenario, strategy;
  std::string verdict;  // the run as written, judged expecting tracks
  bool pass = false;    // it tracks, or a small set of modules was found that makes it track
  std::string message;
  bool localized = false;  // the bisection ran; every field below only then
  bool found = false;
  std::vector<std::string> modules;
  std::string parent;
  int64_t probes = 0;  // probe runs spent
  int64_t candidates = 0;
  double probe_bound = 0;  // 2·log2(candidates) + 2
  int64_t probe_steps = 0;
  std::string localization;  // what was found, or why nothing could be named, in words
  std::string fix;           // no set found: the fix where the strategy says it
  LocalizeCostRecord cost;   // found only
  std::vector<LocalizeProbeRecord> probe_runs;
};

struct LocalizeRecord {
  std::string probe_bound = "2*log2(modules)+2, modules: the parameterised leaf modules bisected";
  std::vector<LocalizeScenarioRecord> scenarios;
};

// ---------------------------------------------------------------------------------------------------------------------
// The record's one description (io/record_json.h: the kind from the C++ type; NaN <-> null). `optional`: written
// only when the flag holds.

template <class V>
void visit_fields(LocalizeProbeRecord& p, V& v) {
  v("keep_fp32", p.keep_fp32);
  v("verdict", p.verdict);
  v("tracks", p.tracks);
  v("ms_per_step", p.ms_per_step);
  v("peak_memory_bytes", p.peak_memory_bytes);
}

template <class V>
void visit_fields(LocalizeCostRecord& c, V& v) {
  v("kept_ms_per_step", c.kept_ms_per_step);
  v("kept_peak_memory_bytes", c.kept_peak_memory_bytes);
  v("failing_ms_per_step", c.failing_ms_per_step);
  v("failing_peak_memory_bytes", c.failing_peak_memory_bytes);
  v("measured_by_extra_probe", c.measured_by_extra_probe);
}

template <class V>
void visit_fields(LocalizeScenarioRecord& s, V& v) {
  v.required("scenario", s.scenario);
  v("strategy", s.strategy);
  v("verdict", s.verdict);
  v("pass", s.pass);
  v("message", s.message);
  v("localized", s.localized);
  const bool l = s.localized;
  v.optional("found", s.found, l);
  v.optional("modules", s.modules, l);
  v.optional("parent", s.parent, l);
  v.optional("probes", s.probes, l);
  v.optional("candidates", s.candidates, l);
  v.optional("probe_bound", s.probe_bound, l);
  v.optional("probe_steps", s.probe_steps, l);
  v.optional("localization", s.localization, l);
  v.optional("fix", s.fix, l && !s.fix.empty());
  v.optional("cost", s.cost, l && s.found);
  v.optional("probe_runs", s.probe_runs, l && !s.probe_runs.empty());
}

template <class V>
void visit_fields(LocalizeRecord& r, V& v) {
  v("probe_bound", r.probe_bound);
  v.optional("scenarios", r.scenarios, !r.scenarios.empty());
}

}  // namespace ampcheck::usecases
