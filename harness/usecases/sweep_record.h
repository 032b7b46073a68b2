// sweep.json's record (internal to usecases: sweep_answer.cpp fills it from the SweepResult and writes it): the sweep's
// answer as a reader of the file sees it — the recommendation, FP32's timing, one row per strategy and its
// localization — described once by `visit_fields` (io/record_json.h), written in that order (ordered_json).
// The fields: docs/USING.md "The sweep's results"; CTest cpu.sweep*, cpu.localize_family and
// bench/sweep_load_campaign.py read them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

// One probe run of a row's localization: the modules it kept in FP32 and the verdict it got.
struct SweepProbeRecord {
  std::vector<std::string> keep_fp32;
  std::string verdict;
};

// A localized row's answer (usecases::Localization, the probes counted and listed).
struct SweepLocalizationRecord {
  bool found = false;
  std::vector<std::string> modules;  // to keep in FP32 (found)
  std::string parent;                // their common parent module
  int64_t probes = 0;                // probe runs spent
  std::vector<SweepProbeRecord> probe_list;
  std::string message;
};

struct SweepStrategyRecord {
  std::string strategy;
  std::string outcome;  // what its recording showed (recording_outcome.h's word)
  std::string verdict;
  bool pass = false;
  std::string message;
  double speedup = NAN;      // FP32's ms/step over this run's (null: unmeasured)
  std::string speed;         // faster | slower | not decisive | "" (unmeasured)
  double speed_noise = NAN;  // the noise factor the ratio had to exceed
  double ms_per_step = NAN;  // steady-state median
  std::vector<double> retimed_ms_per_step, retimed_fp32_ms_per_step;  // the interleaved timing re-runs
  bool localized = false;                                             // (not a field: localization written or not)
  SweepLocalizationRecord localization;
};

struct SweepRecord {
  std::string key;  // the FP32 runs' cache key
  std::string device;
  std::string recommendation;
  int64_t trainings = 0, reused = 0;  // runs trained by this sweep, runs reused from an earlier one
  double seconds = 0;
  double fp32_ms_per_step = NAN;
  double fp32_timing_spread = NAN;            // the timing noise (largest over smallest of FP32's three runs)
  std::vector<double> fp32_runs_ms_per_step;  // fp32, fp32-seed, fp32-skip
  int64_t timing_reruns = 0;
  std::vector<SweepStrategyRecord> strategies;
};

// ---------------------------------------------------------------------------------------------------------------------
// The record's one description (io/record_json.h: the kind from the C++ type; NaN <-> null). `optional`: written
// only when the flag holds.

template <class V>
void visit_fields(SweepProbeRecord& p, V& v) {
  v("keep_fp32", p.keep_fp32);
  v("verdict", p.verdict);
}

template <class V>
void visit_fields(SweepLocalizationRecord& l, V& v) {
  v("found", l.found);
  v("modules", l.modules);
  v("parent", l.parent);
  v("probes", l.probes);
  v.optional("probe_list", l.probe_list, !l.probe_list.empty());
  v("message", l.message);
}

template <class V>
void visit_fields(SweepStrategyRecord& s, V& v) {
  v.required("strategy", s.strategy);
  v("outcome", s.outcome);
  v("verdict", s.verdict);
  v("pass", s.pass);
  v("message", s.message);
  v("speedup", s.speedup);
  v("speed", s.speed);
  v("speed_noise", s.speed_noise);
  v("ms_per_step", s.ms_per_step);
  v("retimed_ms_per_step", s.retimed_ms_per_step);
  v("retimed_fp32_ms_per_step", s.retimed_fp32_ms_per_step);
  v.optional("localization", s.localization, s.localized);  // sweep --localize: the rows it localized
}

template <class V>
void visit_fields(SweepRecord& r, V& v) {
  v("key", r.key);
  v("device", r.device);
  v("recommendation", r.recommendation);
  v("trainings", r.trainings);
  v("reused", r.reused);
  v("seconds", r.seconds);
  v("fp32_ms_per_step", r.fp32_ms_per_step);
  v("fp32_timing_spread", r.fp32_timing_spread);
  v("fp32_runs_ms_per_step", r.fp32_runs_ms_per_step);
  v("timing_reruns", r.timing_reruns);
  v.optional("strategies", r.strategies, !r.strategies.empty());
}

}  // namespace ampcheck::usecases
