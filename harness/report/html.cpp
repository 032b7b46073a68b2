// report.html rendering.
#include "report/html.h"

#include "report/format.h"
#include "report/svg.h"

#include "io/files.h"
#include "trajectory/run_status.h"
#include "trajectory/trajectory_file.h"
#include "verdict/kind.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <sys/stat.h>

namespace ampcheck::report {

namespace {

using svg::escape;

constexpr const char* kRunColor = "#1f77b4";
constexpr const char* kRawColor = "#aec7e8";
constexpr const char* kRefColor = "#444";
constexpr const char* kBandColor = "rgba(44,160,44,0.22)";
constexpr const char* kScaleColor = "#9467bd";
constexpr const char* kSkipColor = "#d62728";
constexpr const char* kEventColor = "#ff7f0e";
constexpr const char* kDevColor = "#e377c2";

std::string anchor(const std::string& name) {
  std::string a = "sc-";
  for (char c : name) a += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return a;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<double> series_or_empty(const trajectory::TrajectoryFile& f, const char* name) {
  auto it = f.series.find(name);
  return it == f.series.end() ? std::vector<double>{} : it->second;
}

const char* kCss =
    R"(body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}h3{font-size:15px;margin:0 0 4px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#fff;background:#2ca02c;border-radius:3px;padding:0 6px}.fail{color:#fff;background:#d62728;border-radius:3px;padding:0 6px}
.warn{color:#000;background:#ffbf00;border-radius:3px;padding:0 6px}ul.warnings{margin:4px 0;color:#8a5a00}
.scenario{border:1px solid #ddd;border-radius:6px;padding:10px 12px;margin:12px 0}.charts{display:flex;flex-wrap:wrap;gap:8px}
.msg{color:#444;margin:2px 0 8px}table.signals{font-size:12px;margin:6px 0 2px}.meta{color:#555;font-size:12px;margin:6px 0 0}
svg .ct{font-size:12px;font-weight:600;fill:#222}svg .ax{font-size:10px;fill:#555}svg .lg{font-size:10px;fill:#333}
svg .note{font-size:12px;fill:#d62728}.workload{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
p.rec{font-size:16px;font-weight:600;margin:4px 0 8px}pre.fix{background:#f6f8fa;border:1px solid #ddd;padding:8px;font-size:12px}
)";

// One row of a workload's strategy comparison: the completed runs of one strategy that were expected to track.
struct StrategyRow {
  std::string strategy;
  std::vector<const ScenarioSummary*> runs;
  double tokens_per_s = NAN, mfu = NAN, worst_bands = 0;
  int64_t peak_memory = 0;
};

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string strategy_comparison(const RunSummary& s) {
  std::map<std::string, std::map<std::string, StrategyRow>> by_workload;
  for (const auto& c : s.scenarios) {
    using verdict::Kind;
    const bool completed = verdict::is(c.verdict, Kind::Tracks) || verdict::is(c.verdict, Kind::Diverges) ||
                           verdict::is(c.verdict, Kind::Stalls);
    if (!completed || !verdict::is(c.expect, Kind::Tracks) || c.workload.empty()) continue;
    auto& row = by_workload[c.workload][c.strategy];
    row.strategy = c.strategy;
    row.runs.push_back(&c);
  }
  std::string timing_method = "-";
  for (const auto& c : s.scenarios)
    if (!c.timing_method.empty()) timing_method = c.timing_method;
  std::ostringstream o;
  o << "<h2>Strategy comparison</h2>\n<p class=\"msg\">Per workload, the completed scenarios expected to track their "
       "FP32 reference, grouped by strategy (median over the group; divergence is the group's worst). Speed-up and "
       "memory are relative to the workload's fp32 group. Throughput: median step time after warm-up ("
    << escape(timing_method) << "); memory: "
    << (s.device_class == "cpu" ? "peak resident set size of the process"
                                : "peak allocated by the CUDA caching allocator")
    << ".</p>\n";
  if (by_workload.empty()) o << "<p>No completed scenarios to compare.</p>\n";
  for (auto& [workload, rows] : by_workload) {
    for (auto& [name, r] : rows) {
      std::vector<double> tps, mfu, mem;
      for (const auto* c : r.runs) {
        tps.push_back(c->tokens_per_s);
        mfu.push_back(c->mfu);
        mem.push_back(static_cast<double>(c->peak_memory_bytes));
        if (std::isfinite(c->max_deviation_bands)) r.worst_bands = std::max(r.worst_bands, c->max_deviation_bands);
      }
      r.tokens_per_s = median(tps);
      r.mfu = median(mfu);
      const double m = median(mem);
      r.peak_memory = std::isfinite(m) ? static_cast<int64_t>(m) : 0;
    }
    const StrategyRow* fp32 = rows.count("fp32") ? &rows.at("fp32") : nullptr;
    std::vector<const StrategyRow*> ordered;
    for (const auto& [name, r] : rows) ordered.push_back(&r);
    std::sort(ordered.begin(), ordered.end(), [](const StrategyRow* a, const StrategyRow* b) {
      if (a->strategy == "fp32" || b->strategy == "fp32") return a->strategy == "fp32" && b->strategy != "fp32";
      return a->strategy < b->strategy;
    });
    o << "<h3>" << escape(workload)
      << "</h3>\n<div class=\"workload\">\n<table class=\"comparison\"><tr><th>strategy</th>"
         "<th>runs</th><th>tokens/s</th><th>speed-up vs fp32</th><th>MFU</th><th>peak memory</th><th>memory saved</th>"
         "<th>worst signal (dev / allowed)</th></tr>\n";
    std::vector<svg::Bar> tput, mem;
    for (const auto* r : ordered) {
      const double speedup = fp32 ? r->tokens_per_s / fp32->tokens_per_s : NAN;
      const double saved = (fp32 && fp32->peak_memory > 0 && r->peak_memory > 0)
                               ? 1.0 - static_cast<double>(r->peak_memory) / static_cast<double>(fp32->peak_memory)
                               : NAN;
      o << "<tr><td>" << escape(r->strategy) << "</td><td class=\"n\">" << r->runs.size() << "</td><td class=\"n\">"
        << format_si(r->tokens_per_s, "") << "</td><td class=\"n\">"
        << (std::isfinite(speedup) ? format_number(speedup, 3) + "x" : "-") << "</td><td class=\"n\">"
        << (std::isfinite(r->mfu) ? format_number(100 * r->mfu, 3) + "%" : "-") << "</td><td class=\"n\">"
        << format_bytes(r->peak_memory) << "</td><td class=\"n\">"
        << (std::isfinite(saved) ? format_number(100 * saved, 3) + "%" : "-") << "</td><td class=\"n\">"
        << format_number(r->worst_bands, 3) << "</td></tr>\n";
      tput.push_back({r->strategy, r->tokens_per_s, kRunColor,
                      format_si(r->tokens_per_s, " tok/s") +
                          (std::isfinite(speedup) ? " (" + format_number(speedup, 3) + "x)" : "")});
      mem.push_back({r->strategy, r->peak_memory > 0 ? static_cast<double>(r->peak_memory) : NAN, kScaleColor,
                     format_bytes(r->peak_memory)});
    }
    o << "</table>\n"
      << svg::bar_chart("throughput (tokens/s)", tput, "throughput") << svg::bar_chart("peak memory", mem, "memory")
      << "</div>\n";
  }
  return o.str();
}

std::string scenario_section(const ScenarioSummary& c, const ScenarioSeries& ser) {
  std::ostringstream o;
  o << "<section class=\"scenario\" id=\"" << anchor(c.name) << "\" data-scenario=\"" << escape(c.name) << "\">\n<h3>"
    << escape(c.name) << " <span class=\"" << (c.pass ? "pass" : "fail") << "\">" << (c.pass ? "PASS" : "FAIL")
    << "</span></h3>\n<div class=\"msg\">" << escape(c.strategy) << " · expected <b>" << escape(c.expect)
    << "</b>, got <b>" << escape(c.verdict) << "</b>: " << escape(c.message) << "</div>\n<div class=\"charts\">\n";
  const int64_t steps =
      std::max<int64_t>(static_cast<int64_t>(ser.reference_loss.size()), static_cast<int64_t>(ser.loss.size()));
  std::string failed_note;
  const auto run_status = trajectory::parse_run_status(ser.status);
  if (run_status == trajectory::RunStatus::Error) failed_note = "raised at step " + std::to_string(ser.loss.size());
  else if (run_status == trajectory::RunStatus::NonFinite)
    failed_note = "non-finite by step " + std::to_string(ser.loss.empty() ? 0 : ser.loss.size() - 1);
  else if (!ser.loaded)
    failed_note = "did not run";

  // 1. loss against the reference band
  svg::LineChart loss("loss vs FP32 reference (trailing mean)", "loss");
  loss.set_min_steps(steps);
  if (!ser.band.empty() && ser.band.size() == ser.reference_smoothed.size()) {
    svg::Band b{{}, {}, kBandColor, "band"};
    for (size_t i = 0; i < ser.band.size(); ++i) {
      b.lo.push_back(ser.reference_smoothed[i] - ser.band[i]);
      b.hi.push_back(ser.reference_smoothed[i] + ser.band[i]);
    }
    loss.set_band(b);
  }
  if (!ser.loss.empty()) loss.add_line({ser.loss, kRawColor, 1.0, "", "per step"});
  if (!ser.reference_smoothed.empty()) loss.add_line({ser.reference_smoothed, kRefColor, 1.2, "4 3", "reference"});
  if (!ser.smoothed_loss.empty()) loss.add_line({ser.smoothed_loss, kRunColor, 1.8, "", "run"});
  loss.add_ticks(ser.event_steps, kEventColor, "events");
  if (!failed_note.empty()) loss.set_note(failed_note);
  o << loss.render("loss");

  // 2. loss scale and skipped steps
  const bool scaler =
      std::any_of(ser.loss_scale.begin(), ser.loss_scale.end(), [](double v) { return std::isfinite(v) && v != 1.0; });
  svg::LineChart scale("loss scale and skipped steps", "scale", 2);
  scale.set_min_steps(steps);
  if (!ser.loss_scale.empty()) scale.add_line({ser.loss_scale, kScaleColor, 1.8, "", "loss scale"});
  scale.add_ticks(ser.skipped_steps, kSkipColor, "skipped");
  if (!failed_note.empty()) scale.set_note(failed_note);
  else if (!scaler)
    scale.set_note("no loss scaling (scale 1)");
  o << scale.render("scale");

  // 3. every signal's deviation per step, in units of its allowed deviation (1 = the edge)
  svg::LineChart dev("every signal vs the reference, in allowed deviations", "deviation / allowed", 10);
  dev.set_min_steps(steps);
  static const std::vector<std::pair<std::string, const char*>> kSignalColors = {{"loss", kDevColor},
                                                                                 {"grad_norm", "#17becf"},
                                                                                 {"update_norm", "#2ca02c"},
                                                                                 {"zero_grads", "#8c564b"},
                                                                                 {"subnormal_grads", "#bcbd22"}};
  for (const auto& [name, color] : kSignalColors) {
    auto it = ser.margins.find(name);
    std::vector<double> clipped = it != ser.margins.end() ? it->second
                                  : name == "loss"        ? ser.deviation_bands
                                                          : std::vector<double>();
    for (double& v : clipped)  // a zero deviation is drawn at the axis floor
      if (std::isfinite(v)) v = std::max(v, 1e-3);
    if (!clipped.empty()) dev.add_line({clipped, color, name == "loss" ? 1.8 : 1.3, "", name});
  }
  dev.add_hline(1.0, kSkipColor, "allowed");
  if (!failed_note.empty()) dev.set_note(failed_note);
  o << dev.render("deviation");
  o << "</div>\n<p class=\"meta\">";
  o << c.steps << " steps";
  if (std::isfinite(c.median_step_ms))
    o << " · step " << format_number(c.median_step_ms, 4) << " ms median [p10 " << format_number(c.p10_step_ms, 4)
      << ", p90 " << format_number(c.p90_step_ms, 4) << "] after " << c.warmup_steps << " warm-up steps ("
      << escape(c.timing_method) << ") · " << format_si(c.tokens_per_s, " tokens/s") << " · "
      << format_number(c.samples_per_s, 4) << " samples/s · " << format_number(c.tflops, 3) << " TFLOP/s, MFU "
      << (std::isfinite(c.mfu) ? format_number(100 * c.mfu, 3) + "%" : "-") << " of " << format_number(c.peak_tflops, 3)
      << " measured (" << escape(c.compute_dtype) << ") · peak memory " << format_bytes(c.peak_memory_bytes)
      << " (reserved " << format_bytes(c.peak_reserved_bytes) << ")";
  if (!c.engine.empty() && c.engine != "stock") o << "<br>engine: " << escape(c.engine);
  if (!ser.events.empty()) {
    o << "<br>events: " << escape(ser.events.front());
    if (ser.events.size() > 1) o << " … and " << (ser.events.size() - 1) << " more";
  }
  o << "</p>\n";
  if (!c.warnings.empty()) {  // findings that did not set the verdict (--strict fails on them)
    o << "<ul class=\"warnings\">\n";
    for (const auto& w : c.warnings)
      o << "<li data-warning=\"" << escape(w.signal) << "\"><b>warning</b> (" << escape(w.signal)
        << "): " << escape(w.message) << "</li>\n";
    o << "</ul>\n";
  }
  if (!c.signals.empty()) {
    o << "<table class=\"signals\"><tr><th>signal</th><th>result</th><th>max deviation / allowed</th><th>at step</th>"
         "<th>what was compared</th></tr>\n";
    for (const auto& g : c.signals)
      o << "<tr data-signal=\"" << escape(g.name) << "\"><td>" << escape(g.name) << "</td><td class=\""
        << (g.fired && !g.decides ? "warn\">diagnostic"
            : g.fired             ? "fail\">" + escape(g.verdict)
            : g.judged            ? "pass\">within"
                                  : "\">not judged")
        << "</td><td class=\"n\">" << (g.judged ? format_number(g.max_margin, 3) : "-") << "</td><td class=\"n\">"
        << (g.max_step >= 0 ? std::to_string(g.max_step) : "-") << "</td><td>" << escape(g.message) << "</td></tr>\n";
    o << "</table>\n";
  }
  o << "</section>\n";
  return o.str();
}

}  // namespace

ScenarioSeries load_series(const std::string& h5_path) {
  const trajectory::TrajectoryFile f = trajectory::read_trajectory_contained(h5_path);
  ScenarioSeries s;
  s.loaded = true;
  s.loss = f.trajectory.column(trajectory::kLoss);
  s.loss_scale = f.trajectory.column(trajectory::kLossScale);
  for (int64_t i = 0; i < f.trajectory.size(); ++i)
    if (f.trajectory.rows[i][trajectory::kSkipped] > 0.5) s.skipped_steps.push_back(i);
  s.smoothed_loss = series_or_empty(f, "smoothed_loss");
  s.reference_loss = series_or_empty(f, "reference_loss");
  s.reference_smoothed = series_or_empty(f, "reference_smoothed_loss");
  s.band = series_or_empty(f, "band");
  s.deviation_bands = series_or_empty(f, "deviation_bands");
  for (const auto& [name, values] : f.series)
    if (name.rfind("margin_", 0) == 0) s.margins[name.substr(7)] = values;
  s.events = f.trajectory.events;
  for (const auto& e : s.events)  // "step 12: ..."
    if (e.rfind("step ", 0) == 0) {
      try {
        const int64_t step = std::stoll(e.substr(5));
        if (s.event_steps.empty() || s.event_steps.back() != step) s.event_steps.push_back(step);
      } catch (const std::exception&) {
      }
    }
  s.status = f.attributes.status ? trajectory::to_string(*f.attributes.status) : "";
  s.error = f.attributes.error.value_or("");
  return s;
}

// Data-parallel scenarios: world size, backend, per-rank step times, the share of the step spent waiting on
// collectives, and whether the ranks agreed.
std::string data_parallel_table(const RunSummary& s) {
  std::ostringstream o;
  bool any = false;
  for (const auto& c : s.scenarios) any |= c.distributed.world_size > 0;
  if (!any) return "";
  o << "<h2>Data parallel</h2>\n<p class=\"msg\">Per rank: median step time after warm-up, and the share of the step "
       "spent waiting on collectives (gradient all-reduce, parameter all-gather, inf-check and consistency "
       "all-reduces; "
       "wall clock). Consistency: every rank's loss scale, skipped flag and parameter checksum compared after each "
       "checked step.</p>\n<table "
       "class=\"summary\"><tr><th>scenario</th><th>ranks</th><th>backend</th><th>sharding</th>"
       "<th>reduce dtype</th><th>ms/step per rank</th><th>collective share per rank</th><th>consistency</th></tr>\n";
  for (const auto& c : s.scenarios) {
    const auto& d = c.distributed;
    if (d.world_size == 0) continue;
    std::string ms, share;
    for (double v : d.rank_median_step_ms) ms += (ms.empty() ? "" : " / ") + format_number(v, 4);
    for (double v : d.rank_collective_share)
      share += (share.empty() ? "" : " / ") + (std::isfinite(v) ? format_number(100 * v, 3) + "%" : "-");
    o << "<tr><td><a href=\"#" << anchor(c.name) << "\">" << escape(c.name) << "</a></td><td class=\"n\">"
      << d.world_size << "</td><td>" << escape(d.backend) << "</td><td>" << escape(d.sharding) << "</td><td>"
      << escape(d.reduce_dtype) << "</td><td class=\"n\">" << ms << "</td><td class=\"n\">" << share << "</td><td>"
      << (d.consistency.empty() ? "ranks agreed at " + std::to_string(d.consistency_checks) + " checks"
                                : "<span class=\"fail\">" + escape(d.consistency) + "</span>")
      << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

namespace {

// The page: its header, `lead` (a sweep's answer) and the scenario table and charts.
std::string render_page(const RunSummary& s, const std::vector<ScenarioSeries>& series, const std::string& title,
                        const std::string& lead);

}  // namespace

std::string render_html(const RunSummary& s, const std::vector<ScenarioSeries>& series) {
  return render_page(
      s, series, "ampcheck report" + (s.suite.empty() ? std::string() : " — suite " + s.suite) + " on " + s.device_name,
      "");
}

std::string render_sweep_html(const RunSummary& s, const SweepPage& page, const std::vector<ScenarioSeries>& series) {
  return render_page(s, series, "ampcheck sweep on " + s.device_name, sweep_lead(page));
}

namespace {

std::string render_page(const RunSummary& s, const std::vector<ScenarioSeries>& series, const std::string& title,
                        const std::string& lead) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << escape(title)
    << "</title>\n<style>\n"
    << kCss << "</style>\n</head>\n<body>\n<h1>" << escape(title) << "</h1>\n<p class=\"msg\">"
    << "<span class=\"" << (s.failed() == 0 ? "pass" : "fail") << "\">" << s.passed() << " passed, " << s.failed()
    << " failed</span> · " << escape(s.device_name) << " (" << escape(s.device_class) << ") · LibTorch "
    << escape(s.libtorch_version) << (s.cuda_version.empty() ? "" : " · CUDA " + escape(s.cuda_version))
    << " · ampcheck " << escape(s.ampcheck_version) << (s.git_commit.empty() ? "" : " · commit " + escape(s.git_commit))
    << " · " << escape(s.date) << "</p>\n";
  o << lead;
  o << "<h2>Scenarios</h2>\n<table "
       "class=\"summary\"><tr><th>scenario</th><th>strategy</th><th>expect</th><th>verdict</th>"
       "<th>signal</th><th>loss first → last</th><th>from step</th><th>max dev / "
       "allowed</th><th>skipped</th><th>ms/step</th><th>tokens/s</th>"
       "<th>MFU</th><th>peak memory</th><th>result</th></tr>\n";
  for (const auto& c : s.scenarios)
    o << "<tr><td><a href=\"#" << anchor(c.name) << "\">" << escape(c.name) << "</a></td><td>" << escape(c.strategy)
      << "</td><td>" << escape(c.expect) << "</td><td>" << escape(c.verdict)
      << (c.warnings.empty() ? std::string()
                             : " <span class=\"warn\">" + std::to_string(c.warnings.size()) +
                                   (c.warnings.size() == 1 ? " warning" : " warnings") + "</span>")
      << "</td><td>" << escape(c.deciding_signal.empty() ? c.max_signal : c.deciding_signal) << "</td><td class=\"n\">"
      << format_number(c.first_loss) << " → " << format_number(c.final_loss) << "</td><td class=\"n\">"
      << (c.first_divergence_step >= 0 ? std::to_string(c.first_divergence_step) : "-") << "</td><td class=\"n\">"
      << format_number(c.max_deviation_bands, 3) << "</td><td class=\"n\">" << c.skipped_steps
      << "</td><td class=\"n\">" << format_number(c.median_step_ms, 4) << "</td><td class=\"n\">"
      << format_si(c.tokens_per_s, "") << "</td><td class=\"n\">"
      << (std::isfinite(c.mfu) ? format_number(100 * c.mfu, 3) + "%" : "-") << "</td><td class=\"n\">"
      << format_bytes(c.peak_memory_bytes) << "</td><td><span class=\"" << (c.pass ? "pass" : "fail") << "\">"
      << (c.pass ? "PASS" : "FAIL") << "</span></td></tr>\n";
  o << "</table>\n";
  o << data_parallel_table(s);
  o << strategy_comparison(s);
  o << "<h2>Trajectories</h2>\n<p class=\"msg\">Loss: the run per step (light), its trailing mean (dark) and the FP32 "
       "reference's trailing mean inside its allowed deviation (k x the FP32 noise runs' deviation, "
       "docs/TOLERANCE.md); "
       "orange ticks mark planted events. Loss scale on a log2 axis, red ticks at skipped steps. Signals: each "
       "signal's deviation from the reference (loss, true grad norm, update norm per lr, zero and subnormal grad "
       "elements; for FP8 runs also the worst cast's clipped and flushed fractions, against absolute floors) divided "
       "by its allowed deviation, log axis; above 1 the signal fires. The table under the charts "
       "gives every signal's comparison, skipped steps and non-finite grads included.</p>\n";
  static const ScenarioSeries kNone;
  for (size_t i = 0; i < s.scenarios.size(); ++i)
    o << scenario_section(s.scenarios[i], i < series.size() ? series[i] : kNone);
  o << "</body>\n</html>\n";
  return o.str();
}

std::vector<ScenarioSeries> load_all_series(const std::string& dir, const RunSummary& s) {
  std::vector<ScenarioSeries> series;
  for (const auto& c : s.scenarios) {
    const std::string p = dir + "/" + c.trajectory_file;
    series.push_back(!c.trajectory_file.empty() && exists(p) ? load_series(p) : ScenarioSeries{});
  }
  return series;
}

}  // namespace

std::string write_html_report(const std::string& dir, const RunSummary& s) {
  const std::string path = dir + "/report.html";
  io::write_file_atomically(path, render_html(s, load_all_series(dir, s)));
  return path;
}

std::string write_sweep_html_report(const std::string& dir, const RunSummary& s, const SweepPage& page) {
  const std::string path = dir + "/report.html";
  io::write_file_atomically(path, render_sweep_html(s, page, load_all_series(dir, s)));
  return path;
}

}  // namespace ampcheck::report
