// The runs of a sweep: plan files, the user's command run per plan, recordings checked against their plans
// (sweep_runs.h).
#include "usecases/sweep_runs.h"

#include "usecases/result_rows.h"
#include "usecases/scenario_files.h"

#include "io/files.h"
#include "reference/external_run.h"
#include "trajectory/run_status.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace ampcheck::usecases {

namespace {

// A plan file (small; ampcheck's own), read without following a link.
std::string read_plan(const std::string& path) { return io::read_tail(path, 1 << 20); }

constexpr const char* kSweepDirectory = "the sweep directory";

// What the recorder must have seen for a strategy: autocast dtype and parameter dtype ("" = not checked).
std::pair<std::string, std::string> expected_precision(const std::string& strategy) {
  if (strategy == "fp32" || strategy == "tf32") return {"none", "float32"};
  if (strategy == "bf16-autocast") return {"bfloat16", "float32"};
  if (strategy == "fp16-autocast-scaler") return {"float16", "float32"};
  if (strategy == "pure-bf16") return {"", "bfloat16"};
  return {"", ""};
}

}  // namespace

std::string plan_text(const PlannedRun& p, const std::string& recording, const std::string& workload) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["run"] = p.run;
  j["strategy"] = p.strategy;
  j["record"] = recording;
  j["max_steps"] = p.max_steps;
  j["seed_offset"] = p.seed_offset;
  j["perturbation"] = p.perturbation;
  j["keep_fp32"] = p.keep_fp32;
  j["workload"] = workload;
  return j.dump(2) + "\n";
}

std::string log_tail(const std::string& path, size_t max_chars) {
  std::string s = io::read_tail(path, max_chars + 1);  // only the end is read, however long the log
  const bool cut = s.size() > max_chars;
  if (cut) s.erase(0, 1);
  // NUL bytes (a preallocated or sparse stretch of the file) would end the message where it is read as a C string
  s.erase(std::remove(s.begin(), s.end(), '\0'), s.end());
  return cut ? "..." + s : s;
}

bool reusable(const PlannedRun& p, const std::string& status, const std::string& plan_applied) {
  // a refused run ended before training: run again (what refused it — the script, the package — may be fixed);
  // a run that crashed (error) or was stopped (interrupted, running) is run again: the script may be fixed since
  if (plan_applied.rfind("refused", 0) == 0) return false;
  using trajectory::RunStatus;
  const auto s = trajectory::parse_run_status(status);
  if (p.strategy == "fp32") return s == RunStatus::Completed;  // the reference: only a run that completed
  return s == RunStatus::Completed || s == RunStatus::NonFinite;
}

ExecutedRun execute_run(const PlannedRun& p, const SweepPaths& paths, const SweepOptions& o, std::ostream& log) {
  ExecutedRun e{p, paths.runs + "/" + p.run + ".h5", paths.logs + "/" + p.run + ".log", {}, false};
  const std::string plan_path = paths.plans + "/" + p.run + ".json";
  const std::string plan = plan_text(p, e.recording, paths.workload);
  // no link anywhere below --out on these paths (a directory restored from a cache may hold one): refused, never
  // followed — checked right before each is read, deleted or handed to the command
  for (const auto& path : {e.recording, e.log, plan_path}) io::refuse_links_below(paths.dir, path, kSweepDirectory);
  if (!o.force && io::file_exists(e.recording) && io::file_exists(plan_path) && read_plan(plan_path) == plan) {
    try {
      const auto f = reference::read_external_run(e.recording);
      const std::string& status = trajectory::to_string(f.attributes.status.value_or(trajectory::RunStatus::Completed));
      if (reusable(p, status, trajectory::text_or(f.attributes.plan_applied, "yes"))) {
        e.reused = true;
        e.process.exit_code = 0;
        log << "  " << p.run << ": reused " << e.recording << " (status " << status << ")\n";
        return e;
      }
      log << "  " << p.run << ": not reusing " << e.recording << " (status " << status << "): trained again\n";
    } catch (const std::exception&) {  // an unreadable or unfinished recording is run again
    }
  }
  // this sweep's own files (the directory is marked as ampcheck's): the old recording and log go
  std::remove(e.recording.c_str());
  std::remove(e.log.c_str());
  io::write_file_atomically(plan_path, plan);
  log << "  " << p.run << " (" << p.strategy
      << (p.keep_fp32.empty() ? "" : ", " + std::to_string(p.keep_fp32.size()) + " module(s) kept in FP32") << ") ..."
      << std::flush;
  e.process = io::run_process(o.command, {{"AMPCHECK_PLAN", plan_path}}, e.log, o.timeout_s);
  log << " " << e.process.describe() << ", " << static_cast<int64_t>(e.process.seconds + 0.5) << " s\n" << std::flush;
  if (e.process.interrupted_by != 0) {
    // the user stopped the sweep: the signal went on to the command, which has ended; the sweep ends the same way
    log << "sweep interrupted by " << io::signal_name(e.process.interrupted_by) << " during run '" << p.run
        << "' (forwarded to the command, which ended: " << e.process.describe() << "); its recording " << e.recording
        << " is trained again by the next sweep, the finished runs are reused\n"
        << std::flush;
    io::end_by_signal(e.process.interrupted_by);
  }
  return e;
}

RecordingCheck check_recording(const ExecutedRun& e) {
  RecordingCheck c;
  const std::string& run = e.plan.run;
  if (!io::file_exists(e.recording)) {
    if (e.process.started && e.process.exit_code == 0 && !e.process.timed_out) {
      c.outcome = RecordingOutcome::NotOptedIn;
      c.message = "the command finished (exit 0) but recorded nothing at " + e.recording +
                  ": it does not opt in. HINT: record with ampcheck.Recorder or the HF / Lightning / Accelerate "
                  "callback, which read AMPCHECK_PLAN (docs/USING.md, \"The sweep's environment contract\")";
    } else {
      c.outcome = RecordingOutcome::Error;
      c.message = "the command " + e.process.describe() + " before recording anything; the end of its log (" + e.log +
                  "):\n" + log_tail(e.log);
    }
    return c;
  }
  try {
    c.file = reference::read_external_run(e.recording);
  } catch (const std::exception& ex) {
    c.outcome = RecordingOutcome::Error;
    c.message = std::string("its recording cannot be read: ") + ex.what();
    return c;
  }
  using trajectory::text_or;
  const trajectory::RunAttributes& a = c.file.attributes;
  const std::string recorded_run = text_or(a.plan_run);
  if (recorded_run.empty()) {
    c.outcome = RecordingOutcome::IgnoredPlan;
    c.message = e.recording +
                " carries no plan_run attribute: the script records, but never read AMPCHECK_PLAN. HINT: use "
                "ampcheck's Recorder or callbacks of this version, or apply the plan yourself (docs/USING.md)";
    return c;
  }
  if (recorded_run != run || text_or(a.plan_strategy) != e.plan.strategy) {
    c.outcome = RecordingOutcome::IgnoredPlan;
    c.message = e.recording + " was recorded for run '" + recorded_run + "' (" + text_or(a.plan_strategy) +
                "), not for this plan's '" + run + "' (" + e.plan.strategy + ")";
    return c;
  }
  const std::string applied = text_or(a.plan_applied, "yes");
  if (applied.rfind("refused", 0) == 0) {
    c.outcome = RecordingOutcome::Refused;
    c.message = applied;
    return c;
  }
  const auto [autocast, params] = expected_precision(e.plan.strategy);
  const std::string got_autocast = text_or(a.autocast_dtype), got_params = text_or(a.param_dtype);
  const bool autocast_off = (!autocast.empty() && !got_autocast.empty() && got_autocast != autocast);
  const bool params_off = (!params.empty() && !got_params.empty() && got_params != params);
  using trajectory::RunStatus;
  const std::optional<RunStatus> run_status = a.status.value_or(RunStatus::Completed);
  const std::string& status = trajectory::to_string(*run_status);
  // (a probe keeps modules in FP32: what the recorder sees at the forward may be FP32 by design)
  if ((autocast_off || params_off) && run_status != RunStatus::Error && e.plan.keep_fp32.empty()) {
    c.outcome = RecordingOutcome::IgnoredPlan;
    c.message = "the run trained with autocast " + got_autocast + " and " + got_params + " parameters; the plan (" +
                e.plan.strategy + ") says autocast " + (autocast.empty() ? "any" : autocast) + " and " +
                (params.empty() ? "any" : params) +
                " parameters: the script overrides the plan (e.g. a hard-coded fp16=True, bf16=True or .half())";
    return c;
  }
  if (c.file.trajectory.rows.empty() && run_status != RunStatus::Error) {
    c.outcome = RecordingOutcome::RecordedNothing;
    c.message = e.recording + " holds no steps (status " + status + ")";
    return c;
  }
  c.outcome = run_status == RunStatus::Running || run_status == RunStatus::Interrupted ? RecordingOutcome::Partial
                                                                                       : RecordingOutcome::Judged;
  return c;
}

}  // namespace ampcheck::usecases
