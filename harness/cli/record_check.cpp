// `ampcheck record` and `ampcheck check`: FP32 references written once per device class, then every scenario
// judged against its reference.
#include "report/format.h"
#include "cli/commands.h"
#include "cli/output_dir.h"
#include "distributed/process_group.h"
#include "cli/verdict_rows.h"

#include "engine/device.h"
#include "run/progress.h"
#include "run/provenance.h"
#include "run/scenario_run.h"
#include "run/engine_warnings.h"
#include "reference/reference_store.h"
#include "trajectory/trajectory_file.h"
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
#include <optional>
#include <set>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace ampcheck::cli {

std::string references_dir() {
  if (const char* env = std::getenv("AMPCHECK_REFERENCES")) return env;
  return std::string(AMPCHECK_SOURCE_DIR) + "/references";
}

namespace {

// --references, else references_dir()
std::string reference_root(const RunOptions& opts) {
  return opts.references.empty() ? references_dir() : opts.references;
}

// Trains one FP32 reference run; throws if it does not complete (a reference must be clean).
trajectory::Trajectory train_reference(const engine::RunConfig& cfg, const at::Device& device) {
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
  const std::string root = reference_root(opts);
  // before any training: under --force, every reference file to be re-recorded must be one ampcheck wrote
  if (opts.force)
    for (const auto& f : files) {
      const auto sc = scenario::load_scenario(f);
      engine::RunConfig base = sc.run;
      if (opts.steps > 0) base.loop.steps = opts.steps;
      const auto device = engine::resolve_device(opts.device.empty() ? sc.device : opts.device);
      refuse_unless_replaceable_file(
          reference::reference_path(root, engine::device_info(device).device_class, reference::reference_key(base).key),
          true, kReferenceFile);
    }
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
              << reference::noise_perturbations(opts.more_noise).size() << " noise runs)\n"
              << std::flush;
    const engine::RunConfig ref_cfg = reference::reference_run_config(base);
    trajectory::TrajectoryFile tf;
    tf.trajectory = train_reference(ref_cfg, device);
    std::vector<double> spread(tf.trajectory.rows.size(), 0.0);
    for (const auto& p : reference::noise_perturbations(opts.more_noise)) {
      const auto t = train_reference(reference::perturbed(ref_cfg, p), device);
      for (size_t s = 0; s < spread.size(); ++s)
        spread[s] =
            std::max(spread[s], std::abs(t.rows[s][trajectory::kLoss] - tf.trajectory.rows[s][trajectory::kLoss]));
      tf.noise_runs.push_back({p.label, t});
    }
    tf.series["loss_spread"] = spread;
    tf.attributes = run::provenance(sc, device);
    tf.attributes["kind"] = "fp32-reference";
    tf.attributes["reference_key"] = key.key;
    tf.attributes["reference_canonical"] = key.canonical;
    std::string labels;
    for (const auto& p : reference::noise_perturbations(opts.more_noise))
      labels += (labels.empty() ? "" : ",") + p.label;
    tf.attributes["noise_runs"] = labels;
    tf.attributes["status"] = "completed";
    if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) tf.attributes["git_commit"] = commit;
    make_dirs(root + "/" + device_class);
    trajectory::write_trajectory(path, tf, opts.force);
    ++recorded;
  }
  std::cout << recorded << " recorded, " << kept << " kept\n";
  return 0;
}

report::ScenarioSummary scenario_row(const scenario::Scenario& sc, const at::Device& device) {
  report::ScenarioSummary row;
  row.name = sc.run.name;
  row.strategy = sc.run.strategy.name;
  row.expect = sc.expect.verdict;
  row.verdict = "-";
  row.device_class = engine::device_info(device).device_class;
  return row;
}

// The run summary's provenance, from the first scenario's: versions, the device, the date, the commit.
void set_provenance(report::RunSummary& summary, const scenario::Scenario& sc, const at::Device& device) {
  const auto prov = run::provenance(sc, device);
  summary.ampcheck_version = prov.at("ampcheck_version");
  summary.libtorch_version = prov.at("libtorch_version");
  summary.cuda_version = prov.at("cuda_version");
  summary.device_name = prov.at("device_name");
  summary.device_class = prov.at("device_class");
  summary.date = prov.at("date");
  if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) summary.git_commit = commit;
}

// What a run measured, into its row: steps, losses, workload, step times, throughput and MFU, memory, engine path.
// peak_tflops: the measured matmul rate per device class / compute dtype, measured once.
void fill_measurements(report::ScenarioSummary& row, const run::ScenarioResult& r, const at::Device& device,
                       std::map<std::string, double>& peak_tflops) {
  row.steps = r.trajectory.size();
  row.skipped_steps = r.trajectory.skipped_steps();
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
    if (!peak_tflops.count(key)) peak_tflops[key] = doctor::measured_matmul_tflops(device.str(), r.compute_dtype);
    row.peak_tflops = peak_tflops[key];
    row.mfu = row.tflops / row.peak_tflops;
  }
  row.peak_memory_bytes = r.peak_memory_bytes;
  row.peak_reserved_bytes = r.peak_reserved_bytes;
  row.engine = r.engine;
  for (const auto& d : r.engine_plan) row.engine_plan.push_back({d.option, d.label, d.note, d.applied});
}

namespace {

// One scenario in this process: its reference, the run, the verdict, the pass rule's decision (verdict::decide) and
// the result file. What stops it (no reference, a result file that may not be replaced) is the row's FAIL message.
// nullopt on a joined rank other than 0: rank 0 judges and writes.
std::optional<report::ScenarioSummary> check_scenario(const scenario::Scenario& sc, const at::Device& device,
                                                      const RunOptions& opts,
                                                      std::map<std::string, double>& peak_tflops) {
  report::ScenarioSummary row = scenario_row(sc, device);
  engine::RunConfig run = sc.run;
  if (opts.steps > 0) run.loop.steps = opts.steps;
  try {
    // load the reference first: a missing one is reported before minutes of training
    const auto ref = reference::load_reference(reference_root(opts), row.device_class, run, opts.suite);
    bool writes = true;
    const auto r = run_any_scenario(sc, opts, &writes, run::terminal_progress(run.loop.steps));
    if (!writes) return std::nullopt;
    verdict::Verdict v = verdict::judge(engine::status_name(r.outcome.status), r.outcome.error, r.trajectory,
                                        ref.file.trajectory, ref.noise, sc.tolerance);
    verdict::apply_rank_consistency(v, r.distributed.diverged_step, r.distributed.consistency);
    if (r.outcome.status == engine::RunOutcome::Status::Completed)  // columns not judged, precision not in effect
      run::add_engine_run_warnings(v, r.trajectory, run.strategy, device.is_cuda(), ref.file.trajectory, ref.noise);
    const auto decision =
        verdict::decide(scenario::expectation(sc.expect), verdict::observe(v, r.outcome.error), opts.strict);
    v.message = decision.verdict_message;  // with the skipped steps outside the expected bounds
    fill_result(row, v, decision);
    fill_distributed(row, r);
    fill_measurements(row, r, device, peak_tflops);
    row.trajectory_file = sc.run.name + ".h5";
    trajectory::TrajectoryFile tf = result_file(sc, device, r);
    tf.attributes["verdict"] = v.verdict;
    tf.attributes["verdict_message"] = v.message;
    tf.attributes["reference"] = ref.path;
    add_verdict_series(tf, v, ref.file.trajectory, ref.loss_spread);
    write_result(opts, row.trajectory_file, tf);
  } catch (const std::exception& e) {
    row.pass = false;
    row.message = e.what();
  }
  return row;
}

}  // namespace

int cmd_check(const RunOptions& requested) {
  const auto files = resolve_scenario_files(requested);
  if (const auto why = why_skipped(files, requested); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return 77;
  }
  refuse_existing_run_outputs(files, requested);  // before any training: nothing run, nothing written
  RunDirectory out(requested);                    // written whole: the run directory appears complete or not at all
  const RunOptions opts = out.staged(requested);
  // a rank of a torchrun / srun job runs its scenarios in this process, in the job's order
  const int64_t jobs = distributed::in_distributed_environment()
                           ? 1
                           : std::min<int64_t>(opts.jobs > 0 ? opts.jobs : default_jobs(opts.device),
                                               static_cast<int64_t>(files.size()));
  // a joined rank other than 0 (RANK set by torchrun / srun): rank 0 judges and writes the reports
  const char* rank_env = std::getenv("RANK");
  bool follower = distributed::in_distributed_environment() && rank_env && std::string(rank_env) != "0";
  report::RunSummary summary;
  if (jobs > 1) {
    std::cout << files.size() << " scenarios, " << jobs << " at a time\n" << std::flush;
    auto par = check_in_processes(files, opts, jobs);
    summary = std::move(par.header);
    summary.scenarios = std::move(par.rows);
  } else {
    std::map<std::string, double> peak_tflops;  // device class / compute dtype -> measured matmul rate
    for (size_t i = 0; i < files.size(); ++i) {
      const auto sc = load_for_run(files[i], opts);
      std::cout << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ")\n"
                << std::flush;
      const at::Device device = run_device(sc, opts);
      if (summary.device_class.empty()) set_provenance(summary, sc, device);
      const auto row = check_scenario(sc, device, opts, peak_tflops);
      if (!row) {
        follower = true;
        continue;
      }
      if (!row->pass) std::cout << "  FAIL " << row->name << ": " << row->message << "\n";
      summary.scenarios.push_back(*row);
    }
  }
  summary.suite = opts.suite;
  summary.strict = opts.strict;
  if (follower) return 0;
  print_result_table(summary);
  for (auto& row : summary.scenarios) row.distributed.rank_files = out.published_path(row.distributed.rank_files);
  report::write_run_reports(opts.out_dir, summary);
  report::write_html_report(opts.out_dir, summary);
  out.publish();
  std::cout << "reports: " << out.final_dir() << "/{summary.json,junit.xml,summary.md,report.html}\n";
  std::cout << summary.passed() << " passed, " << summary.failed() << " failed\n";
  return summary.failed() == 0 ? 0 : 1;
}

namespace {
// report.html / summary.md in a run directory are replaced only under --force, and only if ampcheck wrote them: a
// regular file that starts as ampcheck's report does (its title, or the summary's heading).
void refuse_unless_report_replaceable(const std::string& path, bool force) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!force) throw std::runtime_error(path + " exists. HINT: --force replaces it (and the other report)");
  std::string head;
  if (S_ISREG(st.st_mode)) {
    std::ifstream in(path, std::ios::binary);
    head.resize(512);
    in.read(&head[0], static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
  }
  const bool ours =
      path.size() >= 3 && path.compare(path.size() - 3, 3, ".md") == 0
          ? head.rfind("### ampcheck: ", 0) == 0
          : head.rfind("<!DOCTYPE html>", 0) == 0 && head.find("<title>ampcheck report") != std::string::npos;
  if (!ours)
    throw std::runtime_error(path + ": not a report ampcheck wrote (" +
                             std::string(S_ISLNK(st.st_mode)   ? "a symbolic link"
                                         : S_ISREG(st.st_mode) ? "other content"
                                                               : "not a regular file") +
                             "); refusing to replace it, with or without --force. HINT: move it away first");
}
}  // namespace

// report.html and summary.md again from summary.json and the trajectories (e.g. after an upgrade of ampcheck).
int cmd_report(const std::string& run_dir, bool force) {
  refuse_incomplete_run_directory(run_dir);
  const auto summary = report::read_summary_json(run_dir + "/summary.json");
  for (const char* name : {"report.html", "summary.md"}) refuse_unless_report_replaceable(run_dir + "/" + name, force);
  report::write_markdown(run_dir + "/summary.md", summary);
  std::cout << report::write_html_report(run_dir, summary) << "\n" << run_dir << "/summary.md\n";
  return 0;
}

}  // namespace ampcheck::cli
