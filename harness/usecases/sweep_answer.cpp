// The sweep's answer (sweep_answer.h): timing and speed ranking, the recommendation, the reports and the page.
#include "usecases/sweep_answer.h"

#include "usecases/recordings.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/sweep_record.h"
#include "usecases/sweep_runs.h"

#include "engine/device.h"
#include "io/files.h"
#include "io/record_json.h"
#include "reference/external_run.h"
#include "report/format.h"
#include "report/html.h"
#include "run/provenance.h"
#include "verdict/kind.h"

#include <ATen/Context.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <ostream>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ampcheck::usecases::sweep_answer {

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x) || x <= 0; }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The largest over the smallest (NaN with fewer than two measured values).
double spread(const std::vector<double>& v) {
  double lo = INFINITY, hi = 0;
  int n = 0;
  for (double x : v)
    if (std::isfinite(x) && x > 0) lo = std::min(lo, x), hi = std::max(hi, x), ++n;
  return n >= 2 ? hi / lo : NAN;
}

// faster / slower where the ratio (FP32's ms over the strategy's) lies outside the noise factor, else not decisive.
std::string speed_class(double speedup, double noise) {
  if (!std::isfinite(speedup) || !std::isfinite(noise)) return "not decisive";
  if (speedup > noise) return "faster";
  if (speedup < 1 / noise) return "slower";
  return "not decisive";
}

bool can_be_recommended(const SweepRow& row) {
  return row.outcome == RecordingOutcome::Judged && verdict::is(row.judged.verdict, verdict::Kind::Tracks) &&
         row.judged.pass && std::isfinite(row.speedup);
}

// A tracking strategy (one the recommendation may name) is ranked by rounds of short re-runs interleaved with FP32
// (an FP32 run, then the strategy's, both under the load of that moment), whatever the first ranking said: the first
// ranking compares runs minutes apart, and a load that changes between them (another job starting) passes the FP32
// runs' spread unseen (the load campaign: a 1.47x "faster" that was 0.72x under a steady load). From the second round
// on, decisive when the ratio of the two series' medians lies outside max(kTimingFloor, either series' spread) and
// every round's own ratio lies on the same side of 1; else another round, up to --timing-rounds; else not decisive.
void retime(SweepRow& row, SweepResult& r, const SweepPaths& paths, const SweepOptions& o, int64_t steps,
            std::ostream& log) {
  if (o.timing_rounds <= 0) return;  // (the first ranking stands)
  const std::string first = row.speed;
  log << "timing " << row.strategy << " against FP32 (first ranking: " << first << ", "
      << report::format_number(row.speedup, 3) << "x, noise x" << report::format_number(row.speed_noise, 3)
      << "): interleaved re-runs of " << steps << " steps, at most " << o.timing_rounds << " rounds\n";
  for (int k = 1; k <= o.timing_rounds; ++k) {
    for (const bool is_fp32 : {true, false}) {
      const std::string label = is_fp32 ? "time-fp32-" + row.strategy + "-" + std::to_string(k)
                                        : "time-" + row.strategy + "-" + std::to_string(k);
      // (reused where a resumed sweep finds them: the same answer as the sweep that trained them)
      const ExecutedRun e = execute_run({label, is_fp32 ? "fp32" : row.strategy, "", 0, {}, steps}, paths, o, log);
      (e.reused ? r.reused : r.trainings) += 1;
      ++r.timing_reruns;
      const RecordingCheck c = check_recording(e);
      double ms = NAN;
      if (c.outcome == RecordingOutcome::Judged) {
        report::ScenarioSummary t;
        fill_recorded_measurements(t, c.file);
        ms = t.median_step_ms;
      }
      if (!std::isfinite(ms)) {
        log << "  " << label << ": no step time (" << to_string(c.outcome)
            << "): timing re-runs stopped, not decisive\n";
        row.speed = "not decisive";
        return;
      }
      (is_fp32 ? row.retimed_fp32_ms : row.retimed_ms).push_back(ms);
    }
    if (k < 2 && k < o.timing_rounds) continue;  // a spread needs two runs of each
    bool above = true, below = true;             // every round's own ratio on one side of 1
    for (size_t i = 0; i < row.retimed_ms.size(); ++i) {
      above = above && row.retimed_fp32_ms[i] > row.retimed_ms[i];
      below = below && row.retimed_fp32_ms[i] < row.retimed_ms[i];
    }
    double noise = kTimingFloor;
    for (double x : {spread(row.retimed_fp32_ms), spread(row.retimed_ms), k < 2 ? row.speed_noise : 1.0})
      if (std::isfinite(x)) noise = std::max(noise, x);
    row.speedup = median(row.retimed_fp32_ms) / median(row.retimed_ms);
    row.speed_noise = noise;
    row.speed = speed_class(row.speedup, noise);
    if ((row.speed == "faster" && !above) || (row.speed == "slower" && !below)) row.speed = "not decisive";
    if (row.speed != "not decisive") return;
  }
}

// Every measured row's first ranking against FP32 (the FP32 runs' spread as its noise); the rows that can be
// recommended are then ranked by interleaved re-runs (retime).
void rank_speeds(SweepResult& r, const SweepPaths& paths, const SweepOptions& o, int64_t run_steps, std::ostream& log) {
  const double noise = std::max(kTimingFloor, std::isfinite(r.timing_spread) ? r.timing_spread : INFINITY);
  const int64_t steps = std::min<int64_t>(kTimingSteps, run_steps > 0 ? run_steps : kTimingSteps);
  for (auto& row : r.rows) {
    row.speedup = r.fp32.median_step_ms / row.judged.median_step_ms;
    if (!std::isfinite(row.speedup)) {
      row.speed.clear();
      continue;
    }
    row.speed_noise = noise;
    row.speed = speed_class(row.speedup, noise);
    if (can_be_recommended(row)) retime(row, r, paths, o, steps, log);
  }
}

// How a row's speed was measured, for the recommendation: its ms/step against FP32's and the noise it had to exceed.
std::string timing_words(const SweepRow& row, const SweepResult& r) {
  std::ostringstream s;
  if (!row.retimed_ms.empty())
    s << report::format_number(median(row.retimed_ms), 3) << " vs "
      << report::format_number(median(row.retimed_fp32_ms), 3) << " ms/step in " << row.retimed_ms.size()
      << " interleaved re-run(s) each";
  else
    s << report::format_number(row.judged.median_step_ms, 3) << " vs "
      << report::format_number(r.fp32.median_step_ms, 3) << " ms/step";
  s << "; timing noise x" << report::format_number(row.speed_noise, 3);
  if (row.retimed_ms.empty())
    s << ": FP32's three runs' ms/step differ by " << report::format_number((r.timing_spread - 1) * 100, 2) << "%";
  else
    s << ": the re-runs' own spread";
  return s.str();
}

std::string recommend(const SweepResult& r) {
  const SweepRow *faster = nullptr, *undecided = nullptr, *fastest = nullptr;
  for (const auto& row : r.rows) {
    if (!can_be_recommended(row)) continue;
    if (!fastest || row.speedup > fastest->speedup) fastest = &row;
    if (row.speed == "faster" && (!faster || row.speedup > faster->speedup)) faster = &row;
    if (row.speed == "not decisive" && (!undecided || row.speedup > undecided->speedup)) undecided = &row;
  }
  if (!fastest) {
    // where the localization found the modules that make a strategy track, the answer is that fix
    std::string fixed;
    for (const auto& row : r.rows)
      if (row.localized && row.localization.found) {
        std::string mods;
        for (const auto& m : row.localization.modules) mods += (mods.empty() ? "" : ", ") + m;
        fixed += (fixed.empty() ? "" : "; ") + row.strategy + " tracks with " + mods + " kept in FP32 (" +
                 std::to_string(row.localization.probes.size()) + " probe runs; the fix: report.html)";
      }
    if (!fixed.empty())
      return "none of the strategies tracks FP32 here as the script stands: train in FP32, or " + fixed;
    bool localized = false;  // --localize ran and named nothing (its message says why): no hint to run it
    for (const auto& row : r.rows) localized = localized || row.localized;
    return "none of the strategies tracks FP32 here: train in FP32" +
           std::string(r.rows.empty() ? ""
                       : localized ? " (the localization named no modules to keep in FP32: its reason is in each row)"
                                   : " (--localize names the modules to keep in FP32)");
  }
  auto tracks = [](const SweepRow& row) {
    const std::string signal = row.judged.deciding_signal.empty() ? row.judged.max_signal : row.judged.deciding_signal;
    return row.strategy + ": tracks FP32 (largest deviation: " + signal + ", margin " +
           report::format_number(row.judged.max_deviation_bands, 3) + ")";
  };
  auto memory = [&](const SweepRow& row) {
    if (row.judged.peak_memory_bytes <= 0 || r.fp32.peak_memory_bytes <= 0) return std::string();
    return ", peak memory " + report::format_number(row.judged.peak_memory_bytes / 1048576.0, 4) + " MiB (FP32 " +
           report::format_number(r.fp32.peak_memory_bytes / 1048576.0, 4) + " MiB)";
  };
  std::ostringstream s;
  if (faster) {
    s << tracks(*faster) << ", " << report::format_number(faster->speedup, 3) << "x FP32's speed — faster, decisively ("
      << timing_words(*faster, r) << ")" << memory(*faster);
    if (undecided && undecided->speedup > faster->speedup)
      s << "; " << undecided->strategy << " measured " << report::format_number(undecided->speedup, 3)
        << "x, not decisive";
    return s.str();
  }
  if (undecided) {
    // every tracking strategy the timing cannot tell from FP32, in the sweep's order (not by their measured ratios,
    // which are noise): the answer is FP32's, whatever the load
    s << "not decisive: ";
    int n = 0;
    for (const auto& row : r.rows)
      if (can_be_recommended(row) && row.speed == "not decisive")
        s << (n++ ? ", " : "") << row.strategy << " (" << report::format_number(row.speedup, 3) << "x)";
    s << (n == 1 ? " tracks" : " track") << " FP32, but " << (n == 1 ? "its speed" : "their speed")
      << " against FP32 lies within the timing noise (the fastest measured, " << undecided->strategy << ": "
      << timing_words(*undecided, r) << ", after " << undecided->retimed_ms.size() << " of " << r.timing_rounds
      << " rounds of interleaved timing re-runs): no strategy is shown to beat FP32's speed here; train in FP32 for "
         "speed's sake, or sweep again on a quiet machine";
    return s.str();
  }
  s << "fp32: every strategy that tracks is slower than FP32 on this device, decisively; the fastest, "
    << tracks(*fastest) << ", " << report::format_number(fastest->speedup, 3) << "x FP32's speed ("
    << timing_words(*fastest, r) << ")" << memory(*fastest);
  return s.str();
}

// sweep.json's record (sweep_record.h) from the sweep's result.
SweepRecord sweep_record(const SweepResult& r) {
  SweepRecord x;
  x.key = r.key;
  x.device = r.device;
  x.recommendation = r.recommendation;
  x.trainings = r.trainings;
  x.reused = r.reused;
  x.seconds = r.seconds;
  x.fp32_ms_per_step = r.fp32.median_step_ms;
  x.fp32_timing_spread = r.timing_spread;
  x.fp32_runs_ms_per_step = r.fp32_runs_ms;
  x.timing_reruns = r.timing_reruns;
  for (const auto& row : r.rows) {
    SweepStrategyRecord s;
    s.strategy = row.strategy;
    s.outcome = to_string(row.outcome);
    s.verdict = row.judged.verdict;
    s.pass = row.judged.pass;
    s.message = row.judged.message;
    s.speedup = row.speedup;
    s.speed = row.speed;
    s.speed_noise = row.speed_noise;
    s.ms_per_step = row.judged.median_step_ms;
    s.retimed_ms_per_step = row.retimed_ms;
    s.retimed_fp32_ms_per_step = row.retimed_fp32_ms;
    s.localized = row.localized;
    if (row.localized) {
      const Localization& L = row.localization;
      s.localization.found = L.found;
      s.localization.modules = L.modules;
      s.localization.parent = L.parent;
      s.localization.probes = static_cast<int64_t>(L.probes.size());
      for (const auto& pr : L.probes) s.localization.probe_list.push_back({pr.keep_fp32, pr.outcome.verdict});
      s.localization.message = L.message;
    }
    x.strategies.push_back(std::move(s));
  }
  return x;
}

// report.html's lead (report::SweepPage): the recommendation, the strategies' table, every localization and its fix.
report::SweepPage sweep_page(const SweepResult& r, const std::string& command) {
  report::SweepPage p;
  p.key = r.key;
  p.command = command;
  p.recommendation = r.recommendation;
  std::ostringstream t;
  t << "Speed: each run's ms/step is the median of its step times after warm-up (the recording's step_time_ms). "
       "FP32's is the median of its three runs (";
  for (size_t i = 0; i < r.fp32_runs_ms.size(); ++i)
    t << (i ? " / " : "") << report::format_number(r.fp32_runs_ms[i], 4);
  t << " ms/step); their spread (x" << report::format_number(r.timing_spread, 3)
    << ") is this machine's timing noise. A strategy is called faster or slower only where its ratio to FP32 lies "
       "outside max(x"
    << kTimingFloor << ", that spread); a strategy that tracks is then ranked by up to " << r.timing_rounds
    << " rounds of " << kTimingSteps << "-step re-runs interleaved with FP32 (" << r.timing_reruns
    << " in this sweep): decisive only where the ratio of their medians lies outside both series' spread and every "
       "round agrees, else not decisive.";
  p.timing = t.str();
  report::SweepPage::Row f;
  f.strategy = "fp32";
  f.outcome = to_string(RecordingOutcome::Judged);
  f.verdict = verdict::kNoVerdict;
  f.signal = "-";
  f.speed = "reference";
  f.pass = true;
  f.ms = r.fp32.median_step_ms;
  f.p10_ms = r.fp32.p10_step_ms;
  f.p90_ms = r.fp32.p90_step_ms;
  f.speedup = 1;
  f.noise = r.timing_spread;
  f.tokens_per_s = r.fp32.tokens_per_s;
  f.skipped_steps = r.fp32.skipped_steps;
  f.peak_memory_bytes = r.fp32.peak_memory_bytes;
  f.runs_ms = r.fp32_runs_ms;
  p.rows.push_back(f);
  for (const auto& row : r.rows) {
    const auto& j = row.judged;
    report::SweepPage::Row x;
    x.strategy = row.strategy;
    x.outcome = to_string(row.outcome);
    x.verdict = j.verdict;
    x.signal = j.deciding_signal.empty() ? j.max_signal : j.deciding_signal;
    x.message = j.message;
    x.speed = row.speed;
    x.pass = j.pass;
    x.margin = j.max_deviation_bands;
    x.ms = j.median_step_ms;
    x.p10_ms = j.p10_step_ms;
    x.p90_ms = j.p90_step_ms;
    x.speedup = row.speedup;
    x.noise = row.speed_noise;
    x.tokens_per_s = j.tokens_per_s;
    x.skipped_steps = j.skipped_steps;
    x.peak_memory_bytes = j.peak_memory_bytes;
    x.retimed_ms = row.retimed_ms;
    x.retimed_fp32_ms = row.retimed_fp32_ms;
    p.rows.push_back(x);
    if (!row.localized) continue;
    report::SweepPage::Localized l;
    l.strategy = row.strategy;
    l.message = row.localization.message;
    l.parent = row.localization.parent;
    l.found = row.localization.found;
    l.modules = row.localization.modules;
    if (!l.found) l.fix = fix_without_modules(row.strategy);
    for (const auto& pr : row.localization.probes)
      l.probes.push_back(
          {pr.keep_fp32, pr.outcome.verdict, pr.outcome.message, pr.outcome.ms_per_step, pr.outcome.peak_memory_bytes});
    p.localizations.push_back(l);
  }
  return p;
}

void write_sweep_reports(SweepResult& r, const std::string& command) {
  r.summary.suite = "sweep";
  r.summary.device_class = r.fp32.device_class;
  r.summary.date = run::utc_now();
  for (const auto& row : r.rows) r.summary.scenarios.push_back(row.judged);
  report::write_run_reports(r.dir, r.summary);
  report::write_sweep_html_report(r.dir, r.summary, sweep_page(r, command));
  const nlohmann::ordered_json j = io::record_to_json<nlohmann::ordered_json>(sweep_record(r));
  io::write_file_atomically(r.dir + "/sweep.json", j.dump(2) + "\n");
}

}  // namespace ampcheck::usecases::sweep_answer
