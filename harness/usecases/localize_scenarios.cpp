// localize: the modules whose precision makes an engine scenario fail, by sweep's bisection (localize_scenarios.h).
#include "usecases/localize_scenarios.h"
#include "usecases/localize_record.h"

#include "usecases/judge_engine_run.h"
#include "usecases/recordings.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"

#include "io/files.h"
#include "io/record_json.h"
#include "io/text.h"
#include "reference/reference_store.h"
#include "report/format.h"
#include "report/html.h"
#include "run/provenance.h"
#include "verdict/kind.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>

namespace ampcheck::usecases {

namespace {

// ---------------------------------------------------------------------------------------------------------------
// one run of the scenario, judged expecting tracks

struct JudgedRun {
  run::ScenarioResult result;
  Judged judged;
};

// The scenario as `run` configures it, trained and judged against `reference` (cut to the run's length by the
// caller) as check judges (judge_engine_run).
JudgedRun run_and_judge(const scenario::Scenario& sc, const engine::RunConfig& run, const RunOptions& opts,
                        const at::Device& device, const trajectory::Trajectory& reference,
                        const std::vector<trajectory::LabelledTrajectory>& noise) {
  scenario::Scenario probe = sc;
  probe.run = run;
  JudgedRun j{run::train_scenario(probe, opts.device), {}};
  const verdict::Expectation tracks;  // the question: does it track its FP32 reference?
  j.judged = judge_engine_run(j.result, run.strategy, device, {reference, noise}, tracks, sc.tolerance, opts.strict);
  return j;
}

std::string mib(int64_t bytes) { return bytes > 0 ? report::format_number(bytes / 1048576.0, 4) + " MiB" : "-"; }

// The probe of the search that kept exactly `set` and tracked (null if none).
const ProbeRecord* probe_of(const Localization& L, const std::vector<std::string>& set) {
  const std::set<std::string> want(set.begin(), set.end());
  for (const auto& p : L.probes)
    if (p.outcome.tracks && std::set<std::string>(p.keep_fp32.begin(), p.keep_fp32.end()) == want) return &p;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// one scenario

// One scenario ready to localize, everything read before it trains: its file, the scenario, the device, its FP32
// reference.
struct LocalizeTarget {
  std::string file;
  scenario::Scenario sc;
  at::Device device = at::kCPU;
  reference::Reference ref;
};

// 1. The scenario as written, run, judged and its result file written: false where there is nothing to localize
// (it tracks) or nothing a module's precision explains (it raised an error), with the row saying so.
bool run_as_written(const LocalizeTarget& p, const RunOptions& opts, MatmulPeaks& peaks, std::ostream& log,
                    ScenarioLocalization& s) {
  const scenario::Scenario& sc = p.sc;
  const JudgedRun failing = run_and_judge(sc, sc.run, opts, p.device, p.ref.file.trajectory, p.ref.noise);
  trajectory::TrajectoryFile tf = run::result_file(sc, p.device, failing.result);
  record_judgement(failing.judged, p.ref, s.row, tf, VerdictInFile::Written);
  fill_measurements(s.row, failing.result, peaks.tflops_for(failing.result, p.device));
  s.row.trajectory_file = sc.run.name + ".h5";
  write_result(opts, s.row.trajectory_file, tf);
  s.failing_ms_per_step = s.row.median_step_ms;
  s.failing_peak_memory_bytes = s.row.peak_memory_bytes;
  log << "  " << s.row.verdict << ": " << failing.judged.verdict.message << "\n" << std::flush;
  if (verdict::is(s.row.verdict, verdict::Kind::Tracks)) {
    s.row.message += "; tracks its FP32 reference: nothing to localize";
    return false;
  }
  if (verdict::is(s.row.verdict, verdict::Kind::Error)) {
    s.row.pass = false;
    s.row.message += "; not localized: the run raised an error, which no module's precision explains";
    return false;
  }
  return true;
}

// 3. What keeping the set found costs: the probe that kept exactly it, else one more probe only to measure it.
std::string cost_of_kept(ScenarioLocalization& s, const Probe& probe) {
  const Localization& L = s.localization;
  const ProbeRecord* kept = probe_of(L, L.modules);
  ProbeOutcome measured;
  if (!kept) {
    s.measured_extra = true;
    measured = probe(L.modules);
  }
  const ProbeOutcome& k = kept ? kept->outcome : measured;
  s.kept_ms_per_step = k.ms_per_step;
  s.kept_peak_memory_bytes = k.peak_memory_bytes;
  return "; keeping it: " + report::format_number(s.kept_ms_per_step, 3) + " ms/step, peak " +
         mib(s.kept_peak_memory_bytes) + " (the failing run: " + report::format_number(s.failing_ms_per_step, 3) +
         " ms/step, " + mib(s.failing_peak_memory_bytes) + ")" +
         (s.measured_extra ? ", measured by one more probe" : "");
}

ScenarioLocalization localize_one(const LocalizeTarget& p, const LocalizeOptions& o, const RunOptions& opts,
                                  MatmulPeaks& peaks, std::ostream& log) {
  const scenario::Scenario& sc = p.sc;
  ScenarioLocalization s;
  s.scenario = sc.run.name;
  s.strategy = sc.run.strategy.name;
  s.row = scenario_row(sc, p.device);
  s.row.expect = verdict::to_string(verdict::Kind::Tracks);
  if (!run_as_written(p, opts, peaks, log, s)) return s;
  // 2. the bisection (localize.h), each probe the scenario with model.keep_fp32 = the chosen modules
  std::vector<ModuleInfo> tree;
  for (const auto& m : models::module_tree(models::resolve_preset(sc.run.model)))
    tree.push_back({m.name, m.parameters});
  s.candidates = static_cast<int64_t>(candidate_leaves(tree).size());
  s.probe_bound = s.candidates > 0 ? 2 * std::log2(static_cast<double>(s.candidates)) + 2 : 0;
  s.probe_steps = probe_length(sc.run.loop.steps, s.row.first_divergence_step, o.probe_steps);
  trajectory::TrajectoryFile reference;
  reference.trajectory = p.ref.file.trajectory;
  reference.noise_runs = p.ref.noise;
  const trajectory::TrajectoryFile cut = first_steps(reference, s.probe_steps);
  log << "  localizing over " << s.candidates << " modules (probes of " << s.probe_steps << " steps, at most "
      << static_cast<int64_t>(s.probe_bound) << " probes)\n"
      << std::flush;
  int n = 0;
  const Probe probe = [&](const std::vector<std::string>& keep) {
    engine::RunConfig run = sc.run;
    run.model.keep_fp32 = keep;
    if (s.probe_steps < run.loop.steps) run.loop.stop_after = s.probe_steps;  // the schedule stays the run's
    const JudgedRun j = run_and_judge(sc, run, opts, p.device, cut.trajectory, cut.noise_runs);
    ProbeOutcome out;
    out.verdict = j.judged.verdict.verdict;
    out.tracks = verdict::is(out.verdict, verdict::Kind::Tracks);
    out.message = j.judged.verdict.message;
    out.ms_per_step = j.result.timing.median_ms;
    out.peak_memory_bytes = j.result.peak_memory_bytes;
    log << "  probe " << ++n << ": keep "
        << (keep.size() <= 3 ? io::joined(keep) : std::to_string(keep.size()) + " modules") << " in FP32 -> "
        << out.verdict << " (" << report::format_number(out.ms_per_step, 3) << " ms/step)\n"
        << std::flush;
    return out;
  };
  s.localized = true;
  s.localization = localize(tree, probe);
  const Localization& L = s.localization;
  std::string words = L.message;
  if (L.found) {
    words +=
        " (bound " + report::format_number(s.probe_bound, 3) + " for " + std::to_string(s.candidates) + " modules)";
    words += cost_of_kept(s, probe);
  } else {
    s.fix = fix_without_modules(s.strategy);
    if (!s.fix.empty()) words += "; " + s.fix;
  }
  s.row.pass = L.found;
  s.row.message += "; localized: " + words;
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// localize.json: every scenario's localization, its probes and costs — its record (localize_record.h) from the result

LocalizeRecord localize_record(const LocalizeResult& r) {
  LocalizeRecord x;
  for (const auto& s : r.scenarios) {
    LocalizeScenarioRecord e;
    e.scenario = s.scenario;
    e.strategy = s.strategy;
    e.verdict = s.row.verdict;
    e.pass = s.row.pass;
    e.message = s.row.message;
    e.localized = s.localized;
    if (s.localized) {
      e.found = s.localization.found;
      e.modules = s.localization.modules;
      e.parent = s.localization.parent;
      e.probes = static_cast<int64_t>(s.localization.probes.size());
      e.candidates = s.candidates;
      e.probe_bound = s.probe_bound;
      e.probe_steps = s.probe_steps;
      e.localization = s.localization.message;
      e.fix = s.fix;
      e.cost = {s.kept_ms_per_step, s.failing_ms_per_step, s.kept_peak_memory_bytes, s.failing_peak_memory_bytes,
                s.measured_extra};
      for (const auto& p : s.localization.probes)
        e.probe_runs.push_back(
            {p.keep_fp32, p.outcome.verdict, p.outcome.tracks, p.outcome.ms_per_step, p.outcome.peak_memory_bytes});
    }
    x.scenarios.push_back(std::move(e));
  }
  return x;
}

std::string localize_json(const LocalizeResult& r) {
  return io::record_to_json<nlohmann::ordered_json>(localize_record(r)).dump(2) + "\n";
}

}  // namespace

int LocalizeResult::exit_code() const {
  if (!skipped.empty()) return 77;
  return summary.failed() == 0 ? 0 : 1;
}

LocalizeResult localize_scenarios(const LocalizeOptions& o, std::ostream& log) {
  LocalizeResult result;
  const std::vector<std::string> files = resolve_scenario_files(o.run);
  result.skipped = why_skipped(files, o.run);
  if (!result.skipped.empty()) return result;
  refuse_duplicate_scenario_names(files, o.run);
  // every scenario and its reference checked before anything trains or is written
  std::vector<LocalizeTarget> prepared;
  for (const auto& file : files) {
    LocalizeTarget p{file, load_for_run(file, o.run), at::kCPU, {}};
    if (p.sc.run.distributed.enabled)
      throw std::invalid_argument(file +
                                  ": distributed: localize runs a scenario in one process, its probes with "
                                  "model.keep_fp32 set. HINT: localize the scenario without its distributed: section");
    p.device = run_device(p.sc, o.run);
    p.ref = reference::load_reference(reference_root(o.run), scenario_row(p.sc, p.device).device_class, p.sc.run,
                                      o.run.suite);
    prepared.push_back(std::move(p));
  }
  refuse_existing_run_outputs(files, o.run);
  RunDirectory out(o.run);  // written whole: the run directory appears complete or not at all
  const RunOptions opts = out.staged(o.run);
  MatmulPeaks peaks;  // measured once per compute dtype, for every row's MFU
  for (size_t i = 0; i < prepared.size(); ++i) {
    const auto& p = prepared[i];
    log_scenario_start(log, i, prepared.size(), p.sc);
    if (result.summary.device_class.empty()) set_provenance(result.summary, p.device);
    result.scenarios.push_back(localize_one(p, o, opts, peaks, log));
    result.summary.scenarios.push_back(result.scenarios.back().row);
  }
  result.summary.suite = o.run.suite.empty() ? "localize" : o.run.suite;
  result.summary.strict = o.run.strict;
  report::write_run_reports(out.staging(), result.summary);
  report::write_html_report(out.staging(), result.summary);
  io::write_file_atomically(out.staging() + "/localize.json", localize_json(result));
  out.publish();
  result.reports_dir = out.final_dir();
  return result;
}

}  // namespace ampcheck::usecases
