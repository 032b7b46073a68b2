// `ampcheck reference` and `ampcheck judge`: ampcheck's verdicts for runs of other training loops (issue 9, first
// part). A reference is built from the user's own FP32 run plus a few more FP32 runs (other seeds, ulp-nudged
// weights, another data order) that give the noise; `judge` compares external runs (docs/TRAJECTORY_FORMAT.md)
// with it signal by signal, exactly as `check` compares ampcheck's own runs, and writes the same reports.
#include "cli/commands.h"
#include "cli/verdict_rows.h"

#include "engine/scenario_run.h"
#include "reference/external_run.h"
#include "report/html.h"

#include <cmath>
#include <iostream>
#include <stdexcept>

namespace ampcheck::cli {


namespace {
std::string attr(const reference::TrajectoryFile& f, const std::string& key, const std::string& otherwise = "") {
  auto it = f.attributes.find(key);
  return it == f.attributes.end() || it->second.empty() ? otherwise : it->second;
}
}  // namespace

int cmd_reference(const std::string& fp32_run, const std::vector<std::string>& spread_runs, const std::string& out,
                  bool force) {
  if (spread_runs.empty())
    throw std::runtime_error("--spread: at least one more FP32 run is needed (another seed, ulp-nudged weights or "
                             "another data order): the allowed deviations are measured on how far such runs lie from "
                             "the reference");
  reference::TrajectoryFile ref = reference::read_external_run(fp32_run);
  const auto check_run = [](const reference::TrajectoryFile& f, const std::string& path, int64_t steps) {
    if (f.trajectory.size() != steps)
      throw std::runtime_error(path + ": " + std::to_string(f.trajectory.size()) + " steps, the FP32 run has " +
                               std::to_string(steps) + ": a reference's runs must train the same number of steps");
    for (int64_t s = 0; s < f.trajectory.size(); ++s)
      if (!std::isfinite(f.trajectory.rows[s][engine::kLoss]))
        throw std::runtime_error(path + ": loss at step " + std::to_string(s) +
                                 " is not finite: an FP32 reference run must complete");
  };
  check_run(ref, fp32_run, ref.trajectory.size());
  std::vector<double> spread(ref.trajectory.rows.size(), 0.0);
  for (const auto& path : spread_runs) {
    const auto run = reference::read_external_run(path);
    reference::check_same_training(run, path, ref, fp32_run);
    check_run(run, path, ref.trajectory.size());
    for (size_t s = 0; s < spread.size(); ++s)
      spread[s] = std::max(spread[s], std::abs(run.trajectory.rows[s][engine::kLoss] - ref.trajectory.rows[s][engine::kLoss]));
    ref.noise_runs.push_back({file_stem(path), run.trajectory});
  }
  ref.series["loss_spread"] = spread;
  ref.attributes["kind"] = "external-fp32-reference";
  ref.attributes["reference_of"] = fp32_run;
  ref.attributes["status"] = "completed";
  std::string labels;
  for (const auto& nr : ref.noise_runs) labels += (labels.empty() ? "" : ",") + nr.label;
  ref.attributes["noise_runs"] = labels;
  reference::write_trajectory(out, ref, force);
  std::cout << out << ": reference from " << fp32_run << " (" << ref.trajectory.size() << " steps) and "
            << ref.noise_runs.size() << " noise run(s): " << labels << "\n";
  return 0;
}

int cmd_judge(const std::vector<std::string>& runs, const std::string& reference_path, const std::string& expect,
              const std::string& strategy, const RunOptions& opts) {
  // 1. read and check every input before anything is written: a file that does not follow the format, a run of
  //    another training (provenance, step count) or existing reports without --force end the command here.
  reference::TrajectoryFile ref = reference::read_trajectory(reference_path);
  if (ref.noise_runs.empty())
    throw std::runtime_error(reference_path + ": the reference has no noise runs. HINT: build it with `ampcheck "
                             "reference FP32_RUN --spread RUN...` (or `ampcheck record` for ampcheck's own scenarios)");
  struct Input {
    std::string path, status;
    reference::TrajectoryFile file;
  };
  std::vector<Input> inputs;
  for (const auto& path : runs) {
    Input in{path, "", reference::read_external_run(path)};
    in.status = attr(in.file, "status", "completed");
    if (in.status != "completed" && in.status != "nonfinite" && in.status != "error")
      throw std::runtime_error(path + ": attribute 'status' is '" + in.status + "', expected completed, nonfinite or error");
    if (in.status == "completed" && !in.file.trajectory.rows.empty() &&
        !std::isfinite(in.file.trajectory.rows.back()[engine::kLoss]))
      in.status = "nonfinite";
    reference::check_same_training(in.file, path, ref, reference_path);
    if (in.status == "completed" && in.file.trajectory.size() != ref.trajectory.size())
      throw std::runtime_error(path + ": " + std::to_string(in.file.trajectory.size()) + " steps, the reference " +
                               reference_path + " has " + std::to_string(ref.trajectory.size()) +
                               ". HINT: judge runs against a reference of the same training (steps, model, data)");
    if (in.status != "completed" && in.file.trajectory.size() > ref.trajectory.size())
      throw std::runtime_error(path + ": " + std::to_string(in.file.trajectory.size()) + " steps, more than the " +
                               std::to_string(ref.trajectory.size()) + " of the reference " + reference_path);
    for (const auto& other : inputs)
      if (file_stem(other.path) == file_stem(path))
        throw std::runtime_error(path + " and " + other.path + " have the same name: their results would share " +
                                 file_stem(path) + ".h5 in the output directory");
    inputs.push_back(std::move(in));
  }
  const bool overwrite = opts.force || opts.out_dir == RunOptions{}.out_dir;
  if (!overwrite) {
    for (const char* f : {"summary.json", "junit.xml", "summary.md", "report.html"})
      if (file_exists(opts.out_dir + "/" + f))
        throw std::runtime_error(opts.out_dir + "/" + f + ": exists; refusing to overwrite. HINT: pass --force to "
                                 "replace it, or another --out");
    for (const auto& in : inputs)
      if (file_exists(opts.out_dir + "/" + file_stem(in.path) + ".h5"))
        throw std::runtime_error(opts.out_dir + "/" + file_stem(in.path) + ".h5: exists; refusing to overwrite. "
                                 "HINT: pass --force to replace it, or another --out");
  }

  // 2. judge each run and write its annotated trajectory, then the reports
  const auto spread_it = ref.series.find("loss_spread");
  const std::vector<double> spread =
      spread_it != ref.series.end() ? spread_it->second : std::vector<double>(ref.trajectory.rows.size(), 0.0);
  make_dirs(opts.out_dir);
  report::RunSummary summary;
  summary.suite = "judge";
  summary.device_name = attr(ref, "device_name", "external");
  summary.device_class = attr(ref, "device_class", "external");
  summary.date = engine::utc_now();
  for (const auto& in : inputs) {
    const reference::TrajectoryFile& run = in.file;
    report::ScenarioSummary row;
    row.name = file_stem(in.path);
    row.strategy = !strategy.empty() ? strategy : attr(run, "strategy", "-");
    row.device_class = attr(run, "device_class", summary.device_class);
    row.expect = !expect.empty() ? expect : attr(run, "expect", "tracks");
    const verdict::Verdict v = verdict::judge(in.status, attr(run, "error"), run.trajectory, ref.trajectory,
                                              ref.noise_runs, verdict::Tolerance{});
    row.pass = v.verdict == row.expect;
    row.verdict = v.verdict;
    row.message = row.pass ? v.message : "expected " + row.expect + ", got " + v.verdict + ": " + v.message;
    std::vector<std::string> missing;
    // the columns the signals read (param_norm, loss_scale, step_time_ms and eval_loss are reported, not judged)
    for (int c : {engine::kGradNorm, engine::kUpdateNorm, engine::kLr, engine::kSkipped, engine::kFracZero,
                  engine::kFracSubnormal, engine::kFracNonfinite}) {
      bool present = false;
      for (const auto& p : run.columns_present) present |= p == engine::column_name(c);
      if (!present) missing.push_back(engine::column_name(c));
    }
    if (!missing.empty() && in.status == "completed") {
      std::string m;
      for (const auto& x : missing) m += (m.empty() ? "" : ", ") + x;
      row.message += " (not recorded, not judged: " + m + ")";
    }
    fill_verdict_fields(row, v);
    row.steps = run.trajectory.size();
    row.skipped_steps = run.trajectory.skipped_steps();
    if (!run.trajectory.rows.empty()) {
      row.first_loss = run.trajectory.rows.front()[engine::kLoss];
      row.final_loss = run.trajectory.rows.back()[engine::kLoss];
    }
    row.trajectory_file = row.name + ".h5";
    reference::TrajectoryFile tf = run;
    tf.attributes["status"] = in.status;
    tf.attributes["verdict"] = v.verdict;
    tf.attributes["verdict_message"] = v.message;
    tf.attributes["reference"] = reference_path;
    tf.noise_runs.clear();
    add_verdict_series(tf, v, ref.trajectory, spread);
    reference::write_trajectory(opts.out_dir + "/" + row.trajectory_file, tf, true);
    if (!row.pass) std::cout << "  FAIL " << row.name << ": " << row.message << "\n";
    summary.scenarios.push_back(row);
  }
  print_result_table(summary);
  report::write_run_reports(opts.out_dir, summary);
  report::write_html_report(opts.out_dir, summary);
  std::cout << "reports: " << opts.out_dir << "/{summary.json,junit.xml,summary.md,report.html}\n"
            << summary.passed() << " passed, " << summary.failed() << " failed\n";
  return summary.failed() == 0 ? 0 : 1;
}

}  // namespace ampcheck::cli
