// judge: runs of other training loops (docs/TRAJECTORY_FORMAT.md) judged against a reference built from the user's
// FP32 runs (make_reference.cpp), signal by signal through judge_run, exactly as check judges ampcheck's own runs,
// with what a recording adds (columns never measured, steps without grads, mixed precision not in effect, a partial
// run), and the same reports.
#include "usecases/judge_run.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/recordings.h"
#include "usecases/usecases.h"

#include "io/files.h"
#include "io/text.h"
#include "reference/external_run.h"
#include "run/provenance.h"
#include "verdict/kind.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ostream>
#include <stdexcept>

namespace ampcheck::usecases {

namespace {

using trajectory::text_or;

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
  const int64_t without = run.attributes.steps_without_grads.value_or(0);
  if (without != 0)
    verdict::add_warning(v, "not_judged",
                         "the recorder saw no grads at " + std::to_string(without) +
                             " step(s): grad_norm and the grad fractions were not judged there — was step() called "
                             "after zero_grad()?");
  const bool claims = claims_reduced_precision(strategy);
  const std::string autocast = text_or(run.attributes.autocast_dtype), params = text_or(run.attributes.param_dtype);
  // FP8 training layers (torchao's Float8Linear) cast inside the layer over float32 parameters, autocast off
  const bool fp8_layers = run.attributes.float8_linears.value_or(0) != 0;
  if (claims && autocast == "none" && params == "float32" && !fp8_layers) {
    verdict::add_warning(v, "precision",
                         "mixed precision not in effect: the strategy says " + strategy +
                             " but the recorder saw float32 parameters and no autocast at the forward" +
                             (text_or(run.attributes.grad_scaler) == "enabled" ? "" : ", and no enabled GradScaler") +
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

// From a catch handler: rethrows the exception being handled, with `path` in front where its message does not name
// the file already (an error from the verdict's arithmetic on a hostile run, say): every error names its file.
[[noreturn]] void rethrow_naming(const std::string& path, const std::exception& e) {
  if (std::string(e.what()).find(path) != std::string::npos) throw;
  throw std::runtime_error(path + ": " + e.what());
}

std::string steps_text(int64_t n) { return std::to_string(n); }

// One external run, read and checked against the reference before anything is written.
struct Input {
  std::string path;
  trajectory::RunStatus status = trajectory::RunStatus::Completed;  // a partial run's (Running, Interrupted): Completed
  trajectory::TrajectoryFile file;
  std::string partial;  // "" or why the run has fewer steps than the reference
};

// Only the run's first `n` steps (its per-step FP8 probes and digests too).
void keep_first_steps(trajectory::Trajectory& t, int64_t n) {
  const auto cut = [keep = static_cast<size_t>(n)](auto& per_step) {
    per_step.resize(std::min(per_step.size(), keep));
  };
  cut(t.rows);
  cut(t.fp8.saturated);
  cut(t.fp8.flushed);
  cut(t.fp8.scale);
  cut(t.digests.params);
  cut(t.digests.grads);
}

Input read_input(const std::string& path, const trajectory::TrajectoryFile& ref, const std::string& reference_path,
                 int64_t first_steps, bool written_here, int64_t min_partial_steps) {
  using trajectory::RunStatus;
  Input in{path, RunStatus::Completed, reference::read_external_run(path, !written_here), ""};
  const int64_t recorded = in.file.trajectory.size();
  in.status = in.file.attributes.status.value_or(RunStatus::Completed);  // a word that is no status: refused reading
  // the first steps of a longer run (the live guard judging a run in progress): whatever the run did after them is
  // not this judgement's; judged as a partial run
  if (first_steps > 0 && recorded > first_steps) {
    keep_first_steps(in.file.trajectory, first_steps);
    in.partial = "its first " + steps_text(first_steps) + " of the " + steps_text(recorded) + " steps recorded";
    in.status = RunStatus::Running;
  }
  const int64_t steps = in.file.trajectory.size(), ref_steps = ref.trajectory.size();
  // a partial run: the recorder's last snapshot of a run that was killed (running) or stopped by SIGTERM
  // (interrupted) — judged on the steps it has, against the reference's first as many, and said so
  if (in.status == RunStatus::Running || in.status == RunStatus::Interrupted) {
    if (in.partial.empty())
      in.partial = in.status == RunStatus::Running
                       ? "the run's last snapshot (status running: killed, or still going)"
                       : "interrupted (" + text_or(in.file.attributes.note, "SIGTERM") + ")";
    if (steps > ref_steps)
      throw std::runtime_error(path + ": " + steps_text(steps) + " steps, more than the " + steps_text(ref_steps) +
                               " of the reference " + reference_path);
    in.status = RunStatus::Completed;
  }
  if (in.status == RunStatus::Completed && !in.file.trajectory.rows.empty() &&
      !std::isfinite(in.file.trajectory.rows.back()[trajectory::kLoss]))
    in.status = RunStatus::NonFinite;
  // a partial run shorter than the smoothing window: every signal is a trailing mean over `window` steps and the
  // noise envelope a window of the reference's noise runs, so fewer steps compare a step or two of the run with a
  // band that is not yet measured (a correct run fails at step 0 where the noise runs start where the reference
  // does). Not judged, said so — unless it went non-finite, which needs no band.
  if (!in.partial.empty() && in.status == RunStatus::Completed && steps < min_partial_steps)
    throw std::runtime_error(path + ": " + in.partial + ": " + std::to_string(steps) + " step(s), fewer than the " +
                             std::to_string(min_partial_steps) +
                             " steps a partial run needs to be judged (the signals' smoothing window). HINT: judge it "
                             "after at least " +
                             std::to_string(min_partial_steps) + " steps (the live guard waits for them by itself)");
  reference::check_same_training(in.file, path, ref, reference_path);
  if (in.status == RunStatus::Completed && in.partial.empty() && steps != ref_steps)
    throw std::runtime_error(path + ": " + steps_text(steps) + " steps, the reference " + reference_path + " has " +
                             steps_text(ref_steps) +
                             ". HINT: judge runs against a reference of the same training (steps, model, data)");
  if (in.status != RunStatus::Completed && steps > ref_steps)
    throw std::runtime_error(path + ": " + steps_text(steps) + " steps, more than the " + steps_text(ref_steps) +
                             " of the reference " + reference_path);
  return in;
}

std::vector<Input> read_inputs(const JudgeInputs& j, const trajectory::TrajectoryFile& ref) {
  std::vector<Input> inputs;
  for (const auto& path : j.runs) try {
      Input in = read_input(path, ref, j.reference, j.first_steps, j.runs_written_here, j.tolerance.window);
      for (const auto& other : inputs)
        if (io::file_stem(other.path) == io::file_stem(path))
          throw std::runtime_error(path + " and " + other.path + " have the same name: their results would share " +
                                   io::file_stem(path) + ".h5 in the output directory");
      inputs.push_back(std::move(in));
    } catch (const std::exception& e) {
      rethrow_naming(path, e);
    }
  return inputs;
}

// The summary's header: the versions the runs recorded (the Python recorder's torch_version / cuda_version), else
// the reference's.
report::RunSummary summary_header(const std::vector<Input>& inputs, const trajectory::TrajectoryFile& ref) {
  report::RunSummary summary;
  summary.suite = "judge";
  for (const auto& in : inputs)
    if (summary.libtorch_version.empty())
      summary.libtorch_version = text_or(in.file.attributes.torch_version, text_or(ref.attributes.torch_version));
  if (summary.libtorch_version.empty()) summary.libtorch_version = text_or(ref.attributes.libtorch_version, "-");
  for (const auto& in : inputs)
    if (summary.cuda_version.empty()) summary.cuda_version = text_or(in.file.attributes.cuda_version);
  summary.device_name = text_or(ref.attributes.device_name, "external");
  summary.device_class = text_or(ref.attributes.device_class, "external");
  summary.date = run::utc_now();
  return summary;
}

// "grad_norm, update_norm, ...": the judged columns a completed, whole run did not record ("" if none).
std::string not_recorded(const Input& in) {
  std::string m;
  for (int c : verdict::judged_columns()) {
    const std::string name = trajectory::column_name(c);
    if (std::find(in.file.columns_present.begin(), in.file.columns_present.end(), name) ==
        in.file.columns_present.end())
      m += (m.empty() ? "" : ", ") + name;
  }
  return in.status != trajectory::RunStatus::Completed || !in.partial.empty() ? "" : m;
}

// One run judged (judge_run): its row, and its annotated trajectory file in the staging directory (none if empty).
report::ScenarioSummary judge_one(const Input& in, const JudgeInputs& j, const trajectory::TrajectoryFile& ref,
                                  const std::string& default_device_class, const std::string& staging, bool strict) {
  const trajectory::TrajectoryFile& run = in.file;
  report::ScenarioSummary row;
  row.name = io::printable_text(io::file_stem(in.path));  // a path's bytes need not be UTF-8
  const trajectory::RunAttributes& a = run.attributes;
  row.strategy = !j.strategy.empty() ? j.strategy : text_or(a.strategy, "-");
  row.device_class = text_or(a.device_class, default_device_class);
  row.expect = !j.expect.empty() ? j.expect : text_or(a.expect, verdict::to_string(verdict::Kind::Tracks));
  // a partial run against the reference's first as many steps (its noise runs cut the same way)
  trajectory::Trajectory ref_t = ref.trajectory;
  std::vector<trajectory::LabelledTrajectory> noise = ref.noise_runs;
  if (!in.partial.empty()) {
    const size_t n = run.trajectory.rows.size();
    ref_t.rows.resize(std::min(ref_t.rows.size(), n));
    for (auto& nr : noise) nr.trajectory.rows.resize(std::min(nr.trajectory.rows.size(), n));
  }
  verdict::Expectation expected;  // --expect alone: any error message, no bounds on the skipped steps, no warnings
  expected.verdict = row.expect;
  const Judged judged =
      judge_run({in.status, text_or(a.error), run.trajectory,
                 first_nonfinite_note(a.first_nonfinite_step ? std::to_string(*a.first_nonfinite_step) : "",
                                      text_or(a.first_nonfinite_module), text_or(a.first_nonfinite_pass),
                                      text_or(a.first_nonfinite_op))},
                {ref_t, noise}, expected, j.tolerance, strict, [&](verdict::Verdict& v) {
                  if (in.status == trajectory::RunStatus::Completed) add_recorder_warnings(v, run, row.strategy, ref);
                  // a loss-only recording: what could not be checked, said where it is read (the terminal)
                  if (const std::string missing = not_recorded(in); !missing.empty())
                    verdict::add_warning(v, "not_recorded",
                                         "not recorded, not judged: " + missing +
                                             " — bugs whose effect on the loss is small (lost updates, a skipped "
                                             "clip, a wrong loss scale) go unseen without them; record them with "
                                             "ampcheck.Recorder(path, model, optimizer) or an integration");
                  if (!in.partial.empty())
                    verdict::add_warning(v, "partial",
                                         "partial run: " + steps_text(run.trajectory.size()) + " of the " +
                                             steps_text(ref.trajectory.size()) + " steps, " + in.partial +
                                             "; judged on the steps recorded");
                });
  fill_result(row, judged);
  if (const std::string missing = not_recorded(in); !missing.empty())
    row.message += " (not recorded, not judged: " + missing + ")";
  row.steps = run.trajectory.size();
  row.skipped_steps = run.trajectory.skipped_steps();
  fill_recorded_measurements(row, run);
  if (!run.trajectory.rows.empty()) {
    row.first_loss = run.trajectory.rows.front()[trajectory::kLoss];
    row.final_loss = run.trajectory.rows.back()[trajectory::kLoss];
  }
  row.trajectory_file = row.name + ".h5";
  trajectory::TrajectoryFile tf = run;
  tf.attributes.status = in.status;
  tf.attributes.verdict = judged.verdict.verdict;
  tf.attributes.verdict_message = judged.verdict.message;
  tf.attributes.reference = j.reference;
  tf.noise_runs.clear();
  const auto spread_it = ref.series.find("loss_spread");
  std::vector<double> spread =
      spread_it != ref.series.end() ? spread_it->second : std::vector<double>(ref.trajectory.rows.size(), 0.0);
  spread.resize(std::min(spread.size(), ref_t.rows.size()));
  add_verdict_series(tf, judged.verdict, ref_t, spread);
  if (!staging.empty()) trajectory::write_trajectory(staging + "/" + row.trajectory_file, tf, true);
  return row;
}

}  // namespace

report::ScenarioSummary judge_recording(const std::string& path, const trajectory::TrajectoryFile& ref,
                                        const std::string& reference_path, const JudgeInputs& j,
                                        const std::string& out_dir, bool strict) {
  try {
    const Input in = read_input(path, ref, reference_path, j.first_steps, j.runs_written_here, j.tolerance.window);
    return judge_one(in, j, ref, text_or(ref.attributes.device_class, "external"), out_dir, strict);
  } catch (const std::exception& e) {
    rethrow_naming(path, e);
  }
}

trajectory::TrajectoryFile read_reference(const std::string& path) {
  trajectory::TrajectoryFile ref = trajectory::read_trajectory_contained(path);
  if (ref.noise_runs.empty())
    throw std::runtime_error(path +
                             ": the reference has no noise runs. HINT: build it with `ampcheck "
                             "reference FP32_RUN --spread RUN...` (or `ampcheck record` for ampcheck's own scenarios)");
  reference::check_noise_runs_are_noise(ref, path);
  return ref;
}

SuiteResult judge_runs(const JudgeInputs& j, const RunOptions& opts, std::ostream& log) {
  // 1. read and check every input before anything is written: a file that does not follow the format, a run of
  //    another training (provenance, step count) or existing reports without --force end the command here.
  const trajectory::TrajectoryFile ref = read_reference(j.reference);
  const std::vector<Input> inputs = read_inputs(j, ref);
  check_run_directory_replaceable(opts);  // before anything is judged or written
  // 2. judge each run and write its annotated trajectory, then the reports
  RunDirectory out(opts);  // written whole: the run directory appears complete or not at all
  SuiteResult result;
  result.summary = summary_header(inputs, ref);
  for (const auto& in : inputs) try {
      const auto row = judge_one(in, j, ref, result.summary.device_class, out.staging(), opts.strict);
      if (!row.pass) log << "  FAIL " << io::printable_text(row.name + ": " + row.message) << "\n";
      result.summary.scenarios.push_back(row);
    } catch (const std::exception& e) {
      rethrow_naming(in.path, e);
    }
  publish_reports(out, result);
  return result;
}

}  // namespace ampcheck::usecases
