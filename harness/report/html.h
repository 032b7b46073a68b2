// report.html — the run report for people: one self-contained HTML file (inline CSS and SVG; no scripts, no
// network) with
//   - the run's header (device, versions, pass/fail) and a table of every scenario,
//   - per workload (model and batch shape), a strategy comparison: speed-up over fp32, memory saved, worst
//     divergence, with throughput and peak-memory bars,
//   - per scenario three charts — loss against the FP32 reference and its allowed deviation, loss scale with
//     skipped steps, every signal's deviation per step in units of its allowed deviation — and the table of every
//     signal's comparison with the reference.
// It is written by `ampcheck check` next to summary.json and can be rebuilt from a run directory with
// `ampcheck report RUN_DIR`.
#pragma once

#include "report/summary.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ampcheck::report {

// What the charts of one scenario draw, from its result trajectory file (empty vectors where absent).
struct ScenarioSeries {
  std::vector<double> loss, smoothed_loss, reference_loss, reference_smoothed, band, deviation_bands, loss_scale;
  std::vector<int64_t> skipped_steps;
  std::map<std::string, std::vector<double>> margins;  // signal name -> per-step deviation / allowed
  std::vector<int64_t> event_steps;                    // steps of planted events (injections, restarts)
  std::vector<std::string> events;
  std::string status, error;  // the run's outcome attributes
  bool loaded = false;        // false: no trajectory file (the scenario could not run)
};

// Reads a result trajectory written by `ampcheck check`; throws naming the file on bad input.
ScenarioSeries load_series(const std::string& h5_path);

// series[i] belongs to s.scenarios[i].
std::string render_html(const RunSummary& s, const std::vector<ScenarioSeries>& series);

// Loads every scenario's trajectory from dir and writes dir/report.html atomically. Returns the path.
std::string write_html_report(const std::string& dir, const RunSummary& s);

// A sweep's own page (`ampcheck sweep`): the answer first — the recommendation, the per-strategy table (verdict,
// ms/step with its spread, the speed ranking against FP32, tokens/s, peak memory), each localization with every probe,
// and the fix — then the scenario table and charts of render_html.
struct SweepPage {
  struct Row {
    std::string strategy, outcome, verdict, signal, message;
    std::string speed;  // faster | slower | not decisive | "" (unmeasured); "reference" for FP32's row
    bool pass = false;
    double margin = NAN, ms = NAN, p10_ms = NAN, p90_ms = NAN, speedup = NAN, noise = NAN, tokens_per_s = NAN;
    int64_t skipped_steps = 0, peak_memory_bytes = 0;
    std::vector<double> runs_ms;     // FP32's row: its three runs' ms/step
    std::vector<double> retimed_ms;  // interleaved timing re-runs: this strategy's ms/step
    std::vector<double> retimed_fp32_ms;
  };
  struct Probe {
    std::vector<std::string> keep_fp32;
    std::string verdict, message;
    double ms = NAN;
    int64_t peak_memory_bytes = 0;
  };
  struct Localized {
    std::string strategy, message, parent, fix;
    bool found = false;
    std::vector<std::string> modules;
    std::vector<Probe> probes;
  };
  std::string key, command, recommendation, timing;  // timing: how speed was ranked, in words
  std::vector<Row> rows;                             // FP32's first
  std::vector<Localized> localizations;
};

// The sweep page's lead section (sweep_page.cpp).
std::string sweep_lead(const SweepPage& page);
std::string render_sweep_html(const RunSummary& s, const SweepPage& page, const std::vector<ScenarioSeries>& series);
// Writes dir/report.html (the scenarios' trajectories loaded from dir, as write_html_report). Returns the path.
std::string write_sweep_html_report(const std::string& dir, const RunSummary& s, const SweepPage& page);

}  // namespace ampcheck::report
