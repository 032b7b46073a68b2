// `ampcheck record` and `ampcheck check`: FP32 references written once per device class, then every scenario
// judged against its reference.
#include "report/format.h"
#include "cli/commands.h"
#include "distributed/process_group.h"
#include "cli/verdict_rows.h"

#include "engine/device.h"
#include "run/progress.h"
#include "run/provenance.h"
#include "run/scenario_run.h"
#include "reference/reference_store.h"
#include "reference/trajectory_file.h"
#include "doctor/doctor.h"
#include "report/html.h"
#include "report/summary.h"
#include "scenario/scenario.h"
#include "verdict/verdict.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace ampcheck::cli {

std::string references_dir() {
  if (const char* env = std::getenv("AMPCHECK_REFERENCES")) return env;
  return std::string(AMPCHECK_SOURCE_DIR) + "/references";
}

std::vector<std::string> resolve_scenario_files(const RunOptions& opts);  // commands.cpp
// "" unless every scenario named is data-parallel on CUDA with more ranks than this machine has GPUs: then why
// (check and run skip, exit code 77, as they do without a GPU)
std::string too_few_gpus(const std::vector<std::string>& files, const RunOptions& opts);  // commands.cpp

namespace {


std::string fmt(double v, int prec = 4) { return report::format_number(v, prec); }

// Trains one FP32 reference run; throws if it does not complete (a reference must be clean).
engine::Trajectory train_reference(const engine::RunConfig& cfg, const at::Device& device) {
  engine::Trainer trainer(cfg, device);
  const auto out = trainer.run();
  if (out.status != engine::RunOutcome::Status::Completed)
    throw std::runtime_error("reference run '" + cfg.name + "' ended " + engine::status_name(out.status) + " at step " +
                             std::to_string(out.failed_step) + (out.error.empty() ? "" : ": " + out.error));
  return trainer.trajectory();
}

}  // namespace

int cmd_record(const RunOptions& opts) {
  const auto files = resolve_scenario_files(opts);
  const std::string root = opts.references.empty() ? references_dir() : opts.references;
  std::set<std::string> done;
  int recorded = 0, kept = 0;
  for (const auto& f : files) {
    const auto sc = scenario::load_scenario(f);
    const at::Device device = engine::resolve_device(opts.device.empty() ? sc.device : opts.device);
    const std::string device_class = engine::device_info(device).device_class;
    engine::RunConfig base = sc.run;
    if (opts.steps > 0) base.loop.steps = opts.steps;
    const auto key = reference::reference_key(base);
    const std::string path = reference::reference_path(root, device_class, key.key);
    if (!done.insert(path).second) continue;  // another scenario of the list shares this reference
    if (file_exists(path) && !opts.force) {
      std::cout << "kept      " << path << " (exists; --force re-records it)\n";
      ++kept;
      continue;
    }
    std::cout << "recording " << path << " for " << sc.run.name << " (" << base.loop.steps << " steps + "
              << reference::noise_perturbations(opts.more_noise).size() << " noise runs)\n" << std::flush;
    const engine::RunConfig ref_cfg = reference::reference_run_config(base);
    reference::TrajectoryFile tf;
    tf.trajectory = train_reference(ref_cfg, device);
    std::vector<double> spread(tf.trajectory.rows.size(), 0.0);
    for (const auto& p : reference::noise_perturbations(opts.more_noise)) {
      const auto t = train_reference(reference::perturbed(ref_cfg, p), device);
      for (size_t s = 0; s < spread.size(); ++s)
        spread[s] = std::max(spread[s], std::abs(t.rows[s][engine::kLoss] - tf.trajectory.rows[s][engine::kLoss]));
      tf.noise_runs.push_back({p.label, t});
    }
    tf.series["loss_spread"] = spread;
    tf.attributes = engine::provenance(sc, device);
    tf.attributes["kind"] = "fp32-reference";
    tf.attributes["reference_key"] = key.key;
    tf.attributes["reference_canonical"] = key.canonical;
    std::string labels;
    for (const auto& p : reference::noise_perturbations(opts.more_noise)) labels += (labels.empty() ? "" : ",") + p.label;
    tf.attributes["noise_runs"] = labels;
    tf.attributes["status"] = "completed";
    if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) tf.attributes["git_commit"] = commit;
    make_dirs(root + "/" + device_class);
    reference::write_trajectory(path, tf, opts.force);
    ++recorded;
  }
  std::cout << recorded << " recorded, " << kept << " kept\n";
  return 0;
}

int cmd_check(const RunOptions& opts) {
  const auto files = resolve_scenario_files(opts);
  if (opts.device.rfind("cuda", 0) == 0 && !at::hasCUDA()) {
    std::cout << "SKIPPED: --device " << opts.device << " but no CUDA device is available here\n";
    return 77;
  }
  if (const auto why = too_few_gpus(files, opts); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return 77;
  }
  const std::string root = opts.references.empty() ? references_dir() : opts.references;
  make_dirs(opts.out_dir);
  report::RunSummary summary;
  summary.suite = opts.suite;
  summary.strict = opts.strict;
  std::map<std::string, double> peak_tflops;  // device class / compute dtype -> measured matmul rate
  // a rank of a torchrun / srun job runs its scenarios in this process, in the job's order
  const int64_t jobs = dist::in_distributed_environment()
                           ? 1
                           : std::min<int64_t>(opts.jobs > 0 ? opts.jobs : default_jobs(opts.device),
                                               static_cast<int64_t>(files.size()));
  // a joined rank other than 0 (RANK set by torchrun / srun): rank 0 judges and writes the reports
  const char* rank_env = std::getenv("RANK");
  bool follower = dist::in_distributed_environment() && rank_env && std::string(rank_env) != "0";
  if (jobs > 1) {
    std::cout << files.size() << " scenarios, " << jobs << " at a time\n" << std::flush;
    auto par = check_in_processes(files, opts, jobs);
    const std::string suite = summary.suite;
    summary = par.header;
    summary.suite = suite;
    summary.strict = opts.strict;
    summary.scenarios = std::move(par.rows);
  }
  for (size_t i = 0; jobs <= 1 && i < files.size(); ++i) {
    const auto sc = load_for_run(files[i], opts);
    std::cout << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ")\n"
              << std::flush;
    report::ScenarioSummary row;
    row.name = sc.run.name;
    row.strategy = sc.run.strategy.name;
    row.expect = sc.expect.verdict;
    row.verdict = "-";
    verdict::Verdict v;
    engine::RunConfig run = sc.run;
    if (opts.steps > 0) run.loop.steps = opts.steps;
    const at::Device device = engine::resolve_device(opts.device.empty() ? sc.device : opts.device);
    row.device_class = engine::device_info(device).device_class;
    if (summary.device_class.empty()) {
      const auto prov = engine::provenance(sc, device);
      summary.ampcheck_version = prov.at("ampcheck_version");
      summary.libtorch_version = prov.at("libtorch_version");
      summary.cuda_version = prov.at("cuda_version");
      summary.device_name = prov.at("device_name");
      summary.device_class = prov.at("device_class");
      summary.date = prov.at("date");
      if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) summary.git_commit = commit;
    }
    try {
      // load the reference first: a missing one is reported before minutes of training
      const auto ref = reference::load_reference(root, row.device_class, run, opts.suite);
      bool writes = true;
      auto r = run_any_scenario(sc, opts, &writes, engine::terminal_progress(run.loop.steps));
      if (!writes) {
        follower = true;
        continue;
      }
      v = verdict::judge(engine::status_name(r.outcome.status), r.outcome.error, r.trajectory, ref.file.trajectory,
                         ref.noise, sc.tolerance);
      verdict::apply_rank_consistency(v, r.distributed.diverged_step, r.distributed.consistency);
      if (r.outcome.status == engine::RunOutcome::Status::Completed)  // columns not judged, precision not in effect
        verdict::add_engine_run_warnings(v, r.trajectory, run.strategy, device.is_cuda(), ref.file.trajectory, ref.noise);
      fill_distributed(row, r);
      const int64_t skipped = r.trajectory.skipped_steps();
      const bool skipped_ok = (sc.expect.skipped_min < 0 || skipped >= sc.expect.skipped_min) &&
                              (sc.expect.skipped_max < 0 || skipped <= sc.expect.skipped_max);
      row.pass = v.verdict == sc.expect.verdict &&
                 (sc.expect.verdict != "error" || r.outcome.error == sc.expect.error) && skipped_ok;
      if (!skipped_ok)
        v.message += "; " + std::to_string(skipped) + " skipped steps, expected " +
                     std::to_string(sc.expect.skipped_min) + ".." + std::to_string(sc.expect.skipped_max);
      row.verdict = v.verdict;
      row.message = row.pass ? v.message
                             : "expected " + sc.expect.verdict +
                                   (sc.expect.error.empty() ? "" : " ('" + sc.expect.error + "')") + ", got " +
                                   v.verdict + ": " + v.message;
      apply_warnings(row, v, sc.expect.warnings, opts.strict);
      row.steps = r.trajectory.size();
      fill_verdict_fields(row, v);
      row.skipped_steps = skipped;
      row.first_loss = r.first_loss;
      row.final_loss = r.final_loss;
      row.workload = r.workload;
      row.compute_dtype = r.compute_dtype;
      row.timing_method = r.timing.method;
      row.warmup_steps = r.timing.warmup_steps;
      row.median_step_ms = r.timing.median_ms;
      row.p10_step_ms = r.timing.p10_ms;
      row.p90_step_ms = r.timing.p90_ms;
      const double steps_per_s = 1000.0 / r.timing.median_ms;
      row.tokens_per_s = r.tokens_per_step * steps_per_s;
      row.samples_per_s = r.samples_per_step * steps_per_s;
      row.tflops = r.flops_per_step * steps_per_s / 1e12;
      if (std::isfinite(row.tflops)) {
        const std::string key = row.device_class + "/" + r.compute_dtype;
        if (!peak_tflops.count(key)) peak_tflops[key] = report::measured_matmul_tflops(device.str(), r.compute_dtype);
        row.peak_tflops = peak_tflops[key];
        row.mfu = row.tflops / row.peak_tflops;
      }
      row.peak_memory_bytes = r.peak_memory_bytes;
      row.peak_reserved_bytes = r.peak_reserved_bytes;
      row.engine = r.engine;
      row.trajectory_file = sc.run.name + ".h5";
      reference::TrajectoryFile tf;
      tf.attributes = engine::provenance(sc, device);
      tf.attributes["status"] = engine::status_name(r.outcome.status);
      tf.attributes["error"] = r.outcome.error;
      tf.attributes["verdict"] = v.verdict;
      tf.attributes["engine"] = r.engine;
      tf.attributes["verdict_message"] = v.message;
      tf.attributes["reference"] = ref.path;
      tf.trajectory = r.trajectory;
      add_verdict_series(tf, v, ref.file.trajectory, ref.loss_spread);
      const bool overwrite = opts.force || opts.out_dir == RunOptions{}.out_dir;
      reference::write_trajectory(opts.out_dir + "/" + row.trajectory_file, tf, overwrite);
    } catch (const std::exception& e) {
      row.pass = false;
      row.message = e.what();
    }
    if (!row.pass) std::cout << "  FAIL " << row.name << ": " << row.message << "\n";
    summary.scenarios.push_back(row);
  }
  if (follower) return 0;
  print_result_table(summary);
  report::write_run_reports(opts.out_dir, summary);
  report::write_html_report(opts.out_dir, summary);
  std::cout << "reports: " << opts.out_dir << "/{summary.json,junit.xml,summary.md,report.html}\n";
  std::cout << summary.passed() << " passed, " << summary.failed() << " failed\n";
  return summary.failed() == 0 ? 0 : 1;
}

// report.html and summary.md again from summary.json and the trajectories (e.g. after an upgrade of ampcheck).
int cmd_report(const std::string& run_dir, bool force) {
  const auto summary = report::read_summary_json(run_dir + "/summary.json");
  if (file_exists(run_dir + "/report.html") && !force)
    throw std::runtime_error(run_dir + "/report.html exists. HINT: --force replaces it (and summary.md)");
  report::write_markdown(run_dir + "/summary.md", summary);
  std::cout << report::write_html_report(run_dir, summary) << "\n" << run_dir << "/summary.md\n";
  return 0;
}


void fill_verdict_fields(report::ScenarioSummary& row, const verdict::Verdict& v) {
  row.first_divergence_step = v.first_divergence_step;
  row.max_deviation_bands = v.max_deviation_bands;
  row.deciding_signal = v.deciding_signal;
  row.max_signal = v.max_signal;
  for (const auto& g : v.signals)
    row.signals.push_back({g.name, g.unit, g.judged, g.fired, g.decides, g.verdict, g.first_step, g.max_step, g.max_margin,
                           g.deviation, g.allowed, g.noise, g.run_value, g.reference_value, g.message});
  row.final_loss_ratio = v.final_loss_ratio;
  row.param_drift = v.param_drift;
}

void add_verdict_series(reference::TrajectoryFile& tf, const verdict::Verdict& v, const engine::Trajectory& reference,
                        const std::vector<double>& loss_spread) {
  tf.series["reference_loss"] = reference.column(engine::kLoss);
  tf.series["reference_loss_spread"] = loss_spread;
  tf.series["reference_smoothed_loss"] = v.reference_smoothed;
  tf.series["band"] = v.band;
  if (!v.run_smoothed.empty()) tf.series["smoothed_loss"] = v.run_smoothed;
  if (!v.deviation_bands.empty()) tf.series["deviation_bands"] = v.deviation_bands;
  for (const auto& g : v.signals)
    if (g.judged) tf.series["margin_" + g.name] = g.margin_series;  // deviation / allowed per step
}

void apply_warnings(report::ScenarioSummary& row, const verdict::Verdict& v, const std::vector<std::string>& expected,
                    bool strict) {
  for (const auto& w : v.warnings) row.warnings.push_back({w.signal, w.message});
  const auto raised = [&](const std::string& signal) {
    for (const auto& w : v.warnings)
      if (w.signal == signal) return true;
    return false;
  };
  std::string why;
  for (const auto& e : expected)
    if (!raised(e)) why += (why.empty() ? "" : "; ") + ("expected a " + e + " warning, none was raised");
  if (strict)
    for (const auto& w : v.warnings)
      if (std::find(expected.begin(), expected.end(), w.signal) == expected.end())
        why += (why.empty() ? "" : "; ") + ("--strict: warning " + w.signal + ": " + w.message);
  if (why.empty() || v.verdict == "error") return;
  if (row.pass) row.message = why + " (verdict " + v.verdict + ": " + v.message + ")";
  else row.message += "; " + why;
  row.pass = false;
}

void print_result_table(const report::RunSummary& summary) {
  std::cout << "\n" << std::left << std::setw(38) << "scenario" << std::setw(11) << "device" << std::setw(10) << "expect"
            << std::setw(10) << "verdict" << std::setw(17) << "loss first>last" << std::setw(8) << "from"
            << std::setw(16) << "signal" << std::setw(9) << "margin" << std::setw(9) << "ratio" << std::setw(9) << "drift" << std::setw(8)
            << "skipped" << "result\n";
  for (const auto& r : summary.scenarios) {
    std::cout << std::left << std::setw(38) << r.name << std::setw(11) << r.device_class << std::setw(10) << r.expect
              << std::setw(10) << r.verdict << std::setw(17) << (fmt(r.first_loss) + ">" + fmt(r.final_loss))
              << std::setw(8) << (r.first_divergence_step >= 0 ? std::to_string(r.first_divergence_step) : "-")
              << std::setw(16) << (r.deciding_signal.empty() ? r.max_signal : r.deciding_signal)
              << std::setw(9) << fmt(r.max_deviation_bands, 3) << std::setw(9) << fmt(r.final_loss_ratio, 4)
              << std::setw(9) << fmt(r.param_drift, 3) << std::setw(8) << r.skipped_steps
              << (r.pass ? "PASS" : "FAIL") << "\n";
  }
  // findings that did not set a verdict, one line each (signals not judged, diagnostics, precision not in effect)
  for (const auto& r : summary.scenarios)
    for (const auto& w : r.warnings) std::cout << "WARN " << r.name << " (" << w.signal << "): " << w.message << "\n";
}

}  // namespace ampcheck::cli
