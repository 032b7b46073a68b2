// `ampcheck reference` and `ampcheck judge`: ampcheck's verdicts for runs of other training loops (issue 9, first
// part). A reference is built from the user's own FP32 run plus a few more FP32 runs (other seeds, ulp-nudged
// weights, another data order) that give the noise; `judge` compares external runs (docs/TRAJECTORY_FORMAT.md)
// with it signal by signal, exactly as `check` compares ampcheck's own runs, and writes the same reports.
#include "cli/app.h"
#include "cli/commands.h"
#include "cli/output_dir.h"
#include "cli/verdict_rows.h"

#include "run/provenance.h"
#include "run/scenario_run.h"
#include "reference/external_run.h"
#include "report/html.h"

#include "io/text.h"

#include <cctype>
#include <cmath>
#include <iostream>
#include <map>
#include <stdexcept>

namespace ampcheck::cli {

namespace {
std::string attr(const trajectory::TrajectoryFile& f, const std::string& key, const std::string& otherwise = "") {
  auto it = f.attributes.find(key);
  return it == f.attributes.end() || it->second.empty() ? otherwise : it->second;
}

// Does a strategy's name claim reduced precision? (fp16 / bf16 / half / fp8 / amp / mixed; not fp32 or tf32)
bool claims_reduced_precision(std::string strategy) {
  for (auto& c : strategy) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* k : {"fp16", "bf16", "float16", "half", "fp8", "float8", "amp", "mixed"})
    if (strategy.find(k) != std::string::npos) return true;
  return false;
}

// What `judge` adds to an external run's verdict: columns present but never measured, steps the recorder saw no
// grads at, and mixed precision that never took effect (from the recorder's attributes, else from the trajectory).
void add_recorder_warnings(verdict::Verdict& v, const trajectory::TrajectoryFile& run, const std::string& strategy,
                           const trajectory::TrajectoryFile& ref) {
  for (const auto& w : verdict::unjudged_columns(run.trajectory, run.columns_present, true))
    verdict::add_warning(v, w.signal, w.message);
  const std::string without = attr(run, "steps_without_grads", "0");
  if (without != "0")
    verdict::add_warning(v, "not_judged",
                         "the recorder saw no grads at " + without +
                             " step(s): grad_norm and the grad "
                             "fractions were not judged there — was step() called after zero_grad()?");
  const bool claims = claims_reduced_precision(strategy);
  const std::string autocast = attr(run, "autocast_dtype"), params = attr(run, "param_dtype");
  if (claims && autocast == "none" && params == "float32") {
    verdict::add_warning(v, "precision",
                         "mixed precision not in effect: the strategy says " + strategy +
                             " but the recorder saw float32 parameters and no autocast at the forward" +
                             (attr(run, "grad_scaler") == "enabled" ? "" : ", and no enabled GradScaler") +
                             " — e.g. the HF Trainer's fp16=True on a CPU trains in FP32 silently");
    return;
  }
  std::string cause;
  if (!autocast.empty() || !params.empty())
    cause = "the recorder saw parameters " + (params.empty() ? std::string("?") : params) + ", autocast " +
            (autocast.empty() ? std::string("?") : autocast);
  const std::string m = verdict::precision_not_in_effect(claims, run.trajectory, ref.trajectory, ref.noise_runs, cause);
  if (!m.empty()) verdict::add_warning(v, "precision", m);
}

// What a spread run is: `seed`, `order`, `skip` (the first optimizer step not taken) or `ulp`, from a KIND: prefix on
// the command line or the file's `perturbation` attribute (the recorder's perturbation=...); both given must agree.
struct SpreadRun {
  std::string kind, path;
  trajectory::TrajectoryFile file;  // read once, when its kind is decided
};
SpreadRun spread_kind(const std::string& arg) {
  static const std::vector<std::string> kinds = {"seed", "order", "skip", "ulp"};
  SpreadRun r{"", arg, {}};
  for (const auto& k : kinds)
    if (arg.rfind(k + ":", 0) == 0) r = {k, arg.substr(k.size() + 1), {}};
  if (r.path.empty())
    throw std::runtime_error("--spread " + arg + ": expected [KIND:]FILE, with a file after the label");
  return r;
}

}  // namespace

// What the run itself measured, into its row: step times from its step_time_ms column (the median after warm-up, as
// for ampcheck's own runs), tokens / samples per second where it recorded tokens_per_step / samples_per_step, the
// workload it belongs to (its `workload` or `run_key` attribute: runs of one training compare in the strategy
// table), and the dtype its matmuls ran in (autocast, else the parameters').
static void fill_recorded_measurements(report::ScenarioSummary& row, const trajectory::TrajectoryFile& run) {
  const auto timing = run::step_timing(run.trajectory, attr(run, "timing_method", "wall-clock (recorder)"));
  row.timing_method = timing.method;
  row.warmup_steps = timing.warmup_steps;
  row.median_step_ms = timing.median_ms;
  row.p10_step_ms = timing.p10_ms;
  row.p90_step_ms = timing.p90_ms;
  auto number = [&](const std::string& key) -> double {
    try {
      const std::string v = attr(run, key);
      size_t used = 0;
      const double x = v.empty() ? NAN : std::stod(v, &used);
      return used == v.size() && x > 0 ? x : NAN;
    } catch (const std::exception&) {
      return NAN;
    }
  };
  const double steps_per_s = 1000.0 / timing.median_ms;
  row.tokens_per_s = number("tokens_per_step") * steps_per_s;
  row.samples_per_s = number("samples_per_step") * steps_per_s;
  row.workload = attr(run, "workload", attr(run, "run_key"));
  const std::string autocast = attr(run, "autocast_dtype");
  const std::string params = attr(run, "param_dtype");
  row.compute_dtype = autocast == "float16"    ? "fp16"
                      : autocast == "bfloat16" ? "bf16"
                      : params == "float16"    ? "fp16"
                      : params == "bfloat16"   ? "bf16"
                      : params == "float32"    ? "fp32"
                                               : "";
}

int cmd_reference(const std::string& fp32_run, const std::vector<std::string>& spread_args, const std::string& out,
                  bool force) {
  if (spread_args.empty())
    throw std::runtime_error(
        "--spread: at least one more FP32 run is needed (another seed or another data order): "
        "the allowed deviations are measured on how far such runs lie from the reference");
  refuse_unless_replaceable_file(out, force, kReferenceFile);  // before anything is read: a user's file is not replaced
  // 1. what each spread run is, before anything is read in full: a reference whose spread is only ±1-ulp nudges
  //    measures how fast rounding grows (chaos), not how far an equally valid training lies — correct mixed
  //    precision then fails (docs/TOLERANCE.md)
  std::vector<SpreadRun> spread_runs;
  bool has_valid_alternative = false;
  for (const auto& arg : spread_args) {
    SpreadRun sr = spread_kind(arg);
    sr.file = reference::read_external_run(sr.path);
    const auto& file = sr.file;
    const std::string recorded = attr(file, "perturbation");
    if (!recorded.empty() && recorded != "seed" && recorded != "order" && recorded != "skip" && recorded != "ulp")
      throw std::runtime_error(sr.path + ": attribute 'perturbation' is '" + recorded +
                               "', expected seed, order, skip or ulp for a spread run");
    if (!sr.kind.empty() && !recorded.empty() && sr.kind != recorded)
      throw std::runtime_error(sr.path + ": labelled " + sr.kind +
                               ": on the command line, but its attribute "
                               "'perturbation' says " +
                               recorded);
    if (sr.kind.empty()) sr.kind = recorded;
    if (sr.kind.empty())
      throw std::runtime_error(sr.path +
                               ": what kind of spread run is this? It has no 'perturbation' attribute. "
                               "HINT: label it on the command line — --spread seed:" +
                               sr.path +
                               " (another init seed), "
                               "order:" +
                               sr.path + " (another data order), skip:" + sr.path +
                               " (the first optimizer step not "
                               "taken) or ulp:" +
                               sr.path +
                               " (weights nudged by an ulp) — or record it with "
                               "Recorder(..., perturbation=\"seed\")");
    has_valid_alternative |= sr.kind == "seed" || sr.kind == "order";
    spread_runs.push_back(std::move(sr));
  }
  if (!has_valid_alternative)
    throw std::runtime_error(
        "--spread: every spread run is an ulp nudge; a reference needs at least one seed or order "
        "run. HINT: ±1-ulp runs measure how fast rounding grows in FP32, not how far an equally "
        "valid training lies, so correct mixed precision would fail against them. Train the FP32 "
        "setup once more with another init seed (torch.manual_seed before building the model) or "
        "another data order (the sampler's / data loader's seed; HF TrainingArguments(data_seed=...)) "
        "and pass it as --spread seed:FILE or order:FILE");
  trajectory::TrajectoryFile ref = reference::read_external_run(fp32_run);
  const auto check_run = [](const trajectory::TrajectoryFile& f, const std::string& path, int64_t steps) {
    if (f.trajectory.size() != steps)
      throw std::runtime_error(path + ": " + std::to_string(f.trajectory.size()) + " steps, the FP32 run has " +
                               std::to_string(steps) + ": a reference's runs must train the same number of steps");
    for (int64_t s = 0; s < f.trajectory.size(); ++s)
      if (!std::isfinite(f.trajectory.rows[s][trajectory::kLoss]))
        throw std::runtime_error(path + ": loss at step " + std::to_string(s) +
                                 " is not finite: an FP32 reference run must complete");
  };
  check_run(ref, fp32_run, ref.trajectory.size());
  std::vector<double> spread(ref.trajectory.rows.size(), 0.0);
  std::map<std::string, int> per_kind;
  std::string sources;
  for (const auto& sr : spread_runs) {
    const auto& run = sr.file;
    reference::check_same_training(run, sr.path, ref, fp32_run);
    check_run(run, sr.path, ref.trajectory.size());
    for (size_t s = 0; s < spread.size(); ++s)
      spread[s] = std::max(
          spread[s], std::abs(run.trajectory.rows[s][trajectory::kLoss] - ref.trajectory.rows[s][trajectory::kLoss]));
    // labels: the kind, numbered from the second run of a kind on (seed, seed-2, ...); ulp runs start with "ulp"
    const int k = ++per_kind[sr.kind];
    const std::string label = k == 1 ? sr.kind : sr.kind + "-" + std::to_string(k);
    ref.noise_runs.push_back({label, run.trajectory});
    sources += (sources.empty() ? "" : "\n") + label + "=" + sr.path;
  }
  ref.attributes["noise_sources"] = sources;
  ref.series["loss_spread"] = spread;
  ref.attributes["kind"] = "external-fp32-reference";
  ref.attributes["reference_of"] = fp32_run;
  ref.attributes["status"] = "completed";
  std::string labels;
  for (const auto& nr : ref.noise_runs) labels += (labels.empty() ? "" : ",") + nr.label;
  ref.attributes["noise_runs"] = labels;
  trajectory::write_trajectory(out, ref, force);
  std::cout << out << ": reference from " << fp32_run << " (" << ref.trajectory.size() << " steps) and "
            << ref.noise_runs.size() << " noise run(s): " << labels << "\n";
  return 0;
}

namespace {
// From a catch handler: rethrows the exception being handled, with `path` in front where its message does not name
// the file already (an error from the verdict's arithmetic on a hostile run, say): every error names its file.
[[noreturn]] void rethrow_naming(const std::string& path, const std::exception& e) {
  if (std::string(e.what()).find(path) != std::string::npos) throw;
  throw std::runtime_error(path + ": " + e.what());
}
}  // namespace

int cmd_judge(const std::vector<std::string>& runs, const std::string& reference_path, const std::string& expect,
              const std::string& strategy, const RunOptions& opts) {
  // 1. read and check every input before anything is written: a file that does not follow the format, a run of
  //    another training (provenance, step count) or existing reports without --force end the command here.
  trajectory::TrajectoryFile ref = trajectory::read_trajectory_contained(reference_path);
  if (ref.noise_runs.empty())
    throw std::runtime_error(reference_path +
                             ": the reference has no noise runs. HINT: build it with `ampcheck "
                             "reference FP32_RUN --spread RUN...` (or `ampcheck record` for ampcheck's own scenarios)");
  struct Input {
    std::string path, status;
    trajectory::TrajectoryFile file;
    std::string partial;  // "" or why the run has fewer steps than the reference
  };
  std::vector<Input> inputs;
  for (const auto& path : runs) try {
      Input in{path, "", reference::read_external_run(path), ""};
      in.status = attr(in.file, "status", "completed");
      if (in.status != "completed" && in.status != "nonfinite" && in.status != "error" && in.status != "running" &&
          in.status != "interrupted")
        throw std::runtime_error(path + ": attribute 'status' is '" + in.status +
                                 "', expected completed, nonfinite, error, running or interrupted");
      // a partial run: the recorder's last snapshot of a run that was killed (running) or stopped by SIGTERM
      // (interrupted) — judged on the steps it has, against the reference's first as many, and said so
      if (in.status == "running" || in.status == "interrupted") {
        in.partial = in.status == "running" ? "the run's last snapshot (status running: killed, or still going)"
                                            : "interrupted (" + attr(in.file, "note", "SIGTERM") + ")";
        if (in.file.trajectory.size() > ref.trajectory.size())
          throw std::runtime_error(path + ": " + std::to_string(in.file.trajectory.size()) + " steps, more than the " +
                                   std::to_string(ref.trajectory.size()) + " of the reference " + reference_path);
        in.status = "completed";
      }
      if (in.status == "completed" && !in.file.trajectory.rows.empty() &&
          !std::isfinite(in.file.trajectory.rows.back()[trajectory::kLoss]))
        in.status = "nonfinite";
      reference::check_same_training(in.file, path, ref, reference_path);
      if (in.status == "completed" && in.partial.empty() && in.file.trajectory.size() != ref.trajectory.size())
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
    } catch (const std::exception& e) {
      rethrow_naming(path, e);
    }
  check_run_directory_replaceable(opts);  // before anything is judged or written

  const verdict::Tolerance tol = parse_tolerance_overrides(opts.tolerance);

  // 2. judge each run and write its annotated trajectory, then the reports
  const auto spread_it = ref.series.find("loss_spread");
  const std::vector<double> spread =
      spread_it != ref.series.end() ? spread_it->second : std::vector<double>(ref.trajectory.rows.size(), 0.0);
  RunDirectory out(opts);  // written whole: the run directory appears complete or not at all
  report::RunSummary summary;
  summary.suite = "judge";
  // the versions the runs recorded (the Python recorder's torch_version / cuda_version), else the reference's
  for (const auto& in : inputs)
    if (summary.libtorch_version.empty())
      summary.libtorch_version = attr(in.file, "torch_version", attr(ref, "torch_version"));
  if (summary.libtorch_version.empty()) summary.libtorch_version = attr(ref, "libtorch_version", "-");
  for (const auto& in : inputs)
    if (summary.cuda_version.empty()) summary.cuda_version = attr(in.file, "cuda_version");
  summary.device_name = attr(ref, "device_name", "external");
  summary.device_class = attr(ref, "device_class", "external");
  summary.date = run::utc_now();
  for (const auto& in : inputs) try {
      const trajectory::TrajectoryFile& run = in.file;
      report::ScenarioSummary row;
      row.name = io::printable_text(file_stem(in.path));  // a path's bytes need not be UTF-8
      row.strategy = !strategy.empty() ? strategy : attr(run, "strategy", "-");
      row.device_class = attr(run, "device_class", summary.device_class);
      row.expect = !expect.empty() ? expect : attr(run, "expect", "tracks");
      // a partial run against the reference's first as many steps (its noise runs cut the same way)
      trajectory::Trajectory ref_t = ref.trajectory;
      std::vector<trajectory::LabelledTrajectory> noise = ref.noise_runs;
      if (!in.partial.empty()) {
        const size_t n = run.trajectory.rows.size();
        ref_t.rows.resize(std::min(ref_t.rows.size(), n));
        for (auto& nr : noise) nr.trajectory.rows.resize(std::min(nr.trajectory.rows.size(), n));
      }
      verdict::Verdict v = verdict::judge(in.status, attr(run, "error"), run.trajectory, ref_t, noise, tol);
      if (in.status == "completed") add_recorder_warnings(v, run, row.strategy, ref);
      if (!in.partial.empty())
        verdict::add_warning(v, "partial",
                             "partial run: " + std::to_string(run.trajectory.size()) + " of the " +
                                 std::to_string(ref.trajectory.size()) + " steps, " + in.partial +
                                 "; judged on the steps recorded");
      // --expect alone: any error message, no bounds on the skipped steps, no warnings expected
      verdict::Expectation expected;
      expected.verdict = row.expect;
      fill_result(row, v, verdict::decide(expected, verdict::observe(v, attr(run, "error")), opts.strict));
      std::vector<std::string> missing;
      // the columns the signals read (param_norm, loss_scale, step_time_ms and eval_loss are reported, not judged)
      for (int c : {trajectory::kGradNorm, trajectory::kUpdateNorm, trajectory::kLr, trajectory::kSkipped,
                    trajectory::kFracZero, trajectory::kFracSubnormal, trajectory::kFracNonfinite}) {
        bool present = false;
        for (const auto& p : run.columns_present) present |= p == trajectory::column_name(c);
        if (!present) missing.push_back(trajectory::column_name(c));
      }
      if (!missing.empty() && in.status == "completed" && in.partial.empty()) {
        std::string m;
        for (const auto& x : missing) m += (m.empty() ? "" : ", ") + x;
        row.message += " (not recorded, not judged: " + m + ")";
      }
      row.steps = run.trajectory.size();
      row.skipped_steps = run.trajectory.skipped_steps();
      fill_recorded_measurements(row, run);
      if (!run.trajectory.rows.empty()) {
        row.first_loss = run.trajectory.rows.front()[trajectory::kLoss];
        row.final_loss = run.trajectory.rows.back()[trajectory::kLoss];
      }
      row.trajectory_file = row.name + ".h5";
      trajectory::TrajectoryFile tf = run;
      tf.attributes["status"] = in.status;
      tf.attributes["verdict"] = v.verdict;
      tf.attributes["verdict_message"] = v.message;
      tf.attributes["reference"] = reference_path;
      tf.noise_runs.clear();
      add_verdict_series(
          tf, v, ref_t,
          std::vector<double>(spread.begin(), spread.begin() + std::min(spread.size(), ref_t.rows.size())));
      trajectory::write_trajectory(out.staging() + "/" + row.trajectory_file, tf, true);
      if (!row.pass) std::cout << "  FAIL " << io::printable_text(row.name + ": " + row.message) << "\n";
      summary.scenarios.push_back(row);
    } catch (const std::exception& e) {
      rethrow_naming(in.path, e);
    }
  print_result_table(summary);
  report::write_run_reports(out.staging(), summary);
  report::write_html_report(out.staging(), summary);
  out.publish();
  std::cout << "reports: " << out.final_dir() << "/{summary.json,junit.xml,summary.md,report.html}\n"
            << summary.passed() << " passed, " << summary.failed() << " failed\n";
  return summary.failed() == 0 ? 0 : 1;
}

}  // namespace ampcheck::cli
