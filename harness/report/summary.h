// Run summaries: what `ampcheck check` writes into a run directory besides the trajectories —
//   summary.json  machine-readable, versioned (schema "ampcheck-summary", version 1; fields documented below)
//   junit.xml     one <testcase> per scenario; a FAIL carries the verdict message as <failure>
//   summary.md    a Markdown table that fits a CI step summary
// and the reader `compare` uses. Files are written atomically.
#pragma once

#include "verdict/signals.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::report {

// Version 2 added the measurement fields (workload .. peak_reserved_bytes); version 3 the per-signal comparisons
// (signals, deciding_signal, max_signal); version 4 the warnings (findings that did not set the verdict) and
// `strict`; version 5 the engine plan; version 6 `validation` (rows `ampcheck validate` writes). Older files are still
// read.
constexpr int kSummaryVersion = 6;

// A finding that did not set the verdict (verdict::Warning): a diagnostic beyond its allowance while the outcomes
// track, a column present but never measured, mixed precision not in effect.
struct WarningSummary {
  std::string signal;  // zero_grads | subnormal_grads | fp8_saturated | fp8_flushed | not_judged | precision | ...
  std::string message;
};

struct ScenarioSummary {
  std::string name, strategy, device_class;
  std::string expect;   // expected verdict
  std::string verdict;  // tracks | diverges | stalls | nonfinite | error | "-" (could not run)
  bool pass = false;
  std::string message;  // the verdict's sentence, or why it failed
  int64_t steps = 0;
  int64_t first_divergence_step = -1;
  // NaN where not computed (JSON null)
  double max_deviation_bands = NAN;                // the largest signal margin (deviation / allowed), see max_signal
  std::string deciding_signal;                     // the signal that set a non-tracking verdict ("" otherwise)
  std::string max_signal;                          // the signal with the largest margin
  std::vector<verdict::SignalComparison> signals;  // v3: verdict/signals.h (its visit_fields too)
  std::vector<WarningSummary> warnings;  // v4: shown in the verdict line, junit (a non-failing note), summary.md, html
  double final_loss_ratio = NAN;
  double param_drift = NAN;
  int64_t skipped_steps = 0;
  double first_loss = NAN, final_loss = NAN;
  // measurement (run::StepTiming): per-step times after max(2, 10%) warm-up steps
  std::string workload;       // what throughput compares across: "gpt nano, batch 8 x 64"
  std::string compute_dtype;  // fp32 | tf32 | fp16 | bf16
  std::string timing_method;  // cuda-events | wall-clock
  int64_t warmup_steps = 0;
  double median_step_ms = NAN;                  // median step time
  double p10_step_ms = NAN, p90_step_ms = NAN;  // spread: 10th and 90th percentiles
  double tokens_per_s = NAN;                    // tokens per step / median step time
  double samples_per_s = NAN;                   // sequences per step / median step time
  double tflops = NAN;                          // model FLOPs per step / median step time, 1e12/s
  double peak_tflops = NAN;         // the device's measured matmul rate in compute_dtype (doctor's measurement)
  double mfu = NAN;                 // tflops / peak_tflops
  int64_t peak_memory_bytes = 0;    // CUDA: peak allocated; CPU: peak RSS of the process during the scenario
  int64_t peak_reserved_bytes = 0;  // CUDA: peak reserved by the caching allocator; CPU: as peak_memory_bytes
  std::string trajectory_file;      // relative to the run directory
  std::string engine;               // the engine path (run::ScenarioResult::engine); "" in older summaries
  // (v5) each requested engine option as the run's engine plan resolved it: applied, or refused with the reason
  struct EngineOption {
    std::string option, label, note;  // "model.gemm_epilogues", "GEMM epilogues", how it applied / why not
    bool applied = false;
  };
  std::vector<EngineOption> engine_plan;
  // (v6) `ampcheck validate`: what was compared how (JSON: the "validation" object, absent on other rows)
  struct Validation {
    std::string mode;               // bitwise (the stack matches the golden's) | statistical | "" (not a validate row)
    std::string golden;             // the golden trajectory compared with ("" if none was found)
    std::string golden_class;       // its class (cpu-avx512, cuda-sm90); another than this machine's: the nearest
    std::string stack_differences;  // the fingerprint keys that differ from the golden's ("key: golden -> here; ...")
    bool identical = false;         // bit for bit the golden's (every column and tensor digest)
    int64_t first_step = -1;        // the first step that differs (-1: none / not compared)
    std::string first_difference;   // the bitwise comparison's sentence
    std::string replay;             // transient | persistent | "" (no replay)
    std::string replay_message;
    std::string reference_class;      // the FP32 references of the statistical verdict ("" if none)
    std::string statistical_verdict;  // that verdict (tracks, stalls, ...), whichever mode decided
    std::string plants;               // the planted faults (--plant), comma-separated
  } validation;
  // data parallel (world_size 0: a single-process run; JSON: the "distributed" object, absent then)
  struct Distributed {
    int64_t world_size = 0;
    std::string backend, sharding, reduce_dtype, launch, rank_files;
    std::vector<double> rank_median_step_ms, rank_collective_share;
    int64_t consistency_checks = 0, diverged_step = -1;
    std::string consistency;  // "" when the ranks agreed at every check
  } distributed;
};

struct RunSummary {
  std::string ampcheck_version, libtorch_version, cuda_version, device_name, device_class, date, suite, git_commit;
  bool strict = false;  // v4: --strict — a warning fails its scenario
  std::vector<ScenarioSummary> scenarios;
  int64_t passed() const;
  int64_t failed() const;
};

// ---------------------------------------------------------------------------------------------------------------------
// The record's one description: each field once, with its JSON name (docs/SUMMARY_SCHEMA.md). summary.json's writer
// and reader, `ampcheck check --jobs`' exchange with its worker processes (a summary.json each) and the fuzz targets
// derive from it (io/record_json.h: the kind from the C++ type; NaN <-> null). `required`: a reader's error when
// absent; every other field keeps its default when absent (older versions); `optional`: written only when the flag
// holds. The envelope — schema, version, passed, failed, scenarios — is summary.cpp's; a signal's fields are
// verdict/signals.h's (verdict::SignalComparison, the one type the verdict and the row share).

template <class V>
void visit_fields(WarningSummary& w, V& v) {
  v.required("signal", w.signal);
  v("message", w.message);
}

template <class V>
void visit_fields(ScenarioSummary::EngineOption& o, V& v) {
  v("option", o.option);
  v("label", o.label);
  v("applied", o.applied);
  v("note", o.note);
}

template <class V>
void visit_fields(ScenarioSummary::Validation& x, V& v) {
  v("mode", x.mode);
  v("golden", x.golden);
  v("golden_class", x.golden_class);
  v("stack_differences", x.stack_differences);
  v("identical", x.identical);
  v("first_step", x.first_step);
  v("first_difference", x.first_difference);
  v("replay", x.replay);
  v("replay_message", x.replay_message);
  v("reference_class", x.reference_class);
  v("statistical_verdict", x.statistical_verdict);
  v("plants", x.plants);
}

template <class V>
void visit_fields(ScenarioSummary::Distributed& d, V& v) {
  v("world_size", d.world_size);
  v("backend", d.backend);
  v("sharding", d.sharding);
  v("reduce_dtype", d.reduce_dtype);
  v("launch", d.launch);
  v("rank_files", d.rank_files);
  v("rank_median_step_ms", d.rank_median_step_ms);
  v("rank_collective_share", d.rank_collective_share);
  v("consistency_checks", d.consistency_checks);
  v("diverged_step", d.diverged_step);
  v("consistency", d.consistency);
}

template <class V>
void visit_fields(ScenarioSummary& c, V& v) {
  v.required("name", c.name);  // first: a later field's error names the scenario
  v("strategy", c.strategy);
  v("device_class", c.device_class);
  v.required("expect", c.expect);
  v.required("verdict", c.verdict);
  v.required("pass", c.pass);
  v("message", c.message);
  v("steps", c.steps);
  v("first_divergence_step", c.first_divergence_step);
  v("max_deviation_bands", c.max_deviation_bands);
  v("deciding_signal", c.deciding_signal);  // v3
  v("max_signal", c.max_signal);            // v3
  v("signals", c.signals);                  // v3
  v("warnings", c.warnings);                // v4
  v("final_loss_ratio", c.final_loss_ratio);
  v("param_drift", c.param_drift);
  v("skipped_steps", c.skipped_steps);
  v("first_loss", c.first_loss);
  v("final_loss", c.final_loss);
  v("workload", c.workload);  // v2: the measurements
  v("compute_dtype", c.compute_dtype);
  v("timing_method", c.timing_method);
  v("warmup_steps", c.warmup_steps);
  v("median_step_ms", c.median_step_ms);
  v("p10_step_ms", c.p10_step_ms);
  v("p90_step_ms", c.p90_step_ms);
  v("tokens_per_s", c.tokens_per_s);
  v("samples_per_s", c.samples_per_s);
  v("tflops", c.tflops);
  v("peak_tflops", c.peak_tflops);
  v("mfu", c.mfu);
  v("peak_memory_bytes", c.peak_memory_bytes);
  v("peak_reserved_bytes", c.peak_reserved_bytes);
  v("trajectory_file", c.trajectory_file);
  v("engine", c.engine);
  v("engine_plan", c.engine_plan);                                         // v5
  v.optional("validation", c.validation, !c.validation.mode.empty());      // v6: validate rows only
  v.optional("distributed", c.distributed, c.distributed.world_size > 0);  // data-parallel rows only
}

template <class V>
void visit_fields(RunSummary& s, V& v) {  // the run's header; its scenarios: summary.cpp
  v("ampcheck_version", s.ampcheck_version);
  v("libtorch_version", s.libtorch_version);
  v("cuda_version", s.cuda_version);
  v("device_name", s.device_name);
  v("device_class", s.device_class);
  v("date", s.date);
  v("suite", s.suite);
  v("git_commit", s.git_commit);
  v("strict", s.strict);  // v4
}

void write_summary_json(const std::string& path, const RunSummary& s);
RunSummary read_summary_json(const std::string& path);  // throws naming the file and field on bad input
void write_junit(const std::string& path, const RunSummary& s);
void write_markdown(const std::string& path, const RunSummary& s);

// Writes all three into dir.
void write_run_reports(const std::string& dir, const RunSummary& s);

}  // namespace ampcheck::report
