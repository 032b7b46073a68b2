// run_scenario: the glue between a Scenario and the Trainer.
#include "engine/scenario_run.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <functional>
#include <memory>
#include <unistd.h>

namespace ampcheck::engine {

std::map<std::string, std::string> provenance(const scenario::Scenario& sc, const at::Device& device) {
  const DeviceInfo info = device_info(device);
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"ampcheck_version", AMPCHECK_VERSION},
          {"libtorch_version", libtorch_version()},
          {"cuda_version", cuda_runtime_version()},
          {"cudnn_version", cudnn_version()},
          {"device_name", info.name},
          {"device_class", info.device_class},
          {"scenario_name", sc.run.name},
          {"scenario_path", sc.path},
          {"scenario_text", sc.text},
          {"scenario_hash", std::to_string(std::hash<std::string>{}(sc.text))},
          {"strategy", sc.run.strategy.name + ": " + sc.run.strategy.describe()},
          {"date", date}};
}

Trainer::ProgressFn terminal_progress(int64_t total_steps) {
  const bool tty = ::isatty(STDOUT_FILENO);
  auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto next_plain = std::make_shared<int64_t>(0);
  return [=](int64_t step, const Trajectory& t) {
    const int64_t done = step + 1;
    if (!tty && done < *next_plain && done != total_steps) return;
    *next_plain = done + std::max<int64_t>(1, total_steps / 10);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
    const double eta = done > 0 ? elapsed / done * (total_steps - done) : 0;
    const auto& row = t.rows.back();
    char line[160];
    std::snprintf(line, sizeof(line), "  step %lld/%lld  loss %.4f  scale %g  skipped %lld  eta %.0fs",
                  static_cast<long long>(done), static_cast<long long>(total_steps), row[kLoss], row[kLossScale],
                  static_cast<long long>(t.skipped_steps()), eta);
    if (tty) std::printf("\r%-78s%s", line, done == total_steps ? "\n" : "");
    else std::printf("%s\n", line);
    std::fflush(stdout);
  };
}

ScenarioResult run_scenario(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps_override,
                            Trainer::ProgressFn progress) {
  ScenarioResult r;
  r.name = sc.run.name;
  RunConfig cfg = sc.run;
  if (steps_override > 0) cfg.loop.steps = steps_override;
  const at::Device device = resolve_device(device_spec.empty() ? sc.device : device_spec);
  r.device_class = device_info(device).device_class;
  reset_peak_memory(device);
  try {
    Trainer trainer(cfg, device);
    if (progress) trainer.set_progress(progress);
    r.model_description = trainer.model().describe();
    r.tokens_per_step = static_cast<double>(trainer.config().data.batch_size * trainer.config().data.seq_len *
                                            cfg.loop.micro_batches);
    r.outcome = trainer.run();
    r.trajectory = trainer.trajectory();
    r.peak_memory_bytes = memory_stats(device).peak_allocated_bytes;
  } catch (const std::exception& e) {  // construction refused (unsupported here, bad data)
    r.outcome.status = RunOutcome::Status::Error;
    r.outcome.error = e.what();
  }
  const auto& rows = r.trajectory.rows;
  if (!rows.empty()) {
    r.first_loss = rows.front()[kLoss];
    r.final_loss = rows.back()[kLoss];
    r.min_loss = rows.front()[kLoss];
    for (const auto& row : rows) r.min_loss = std::min(r.min_loss, row[kLoss]);
    std::vector<double> times;
    for (size_t i = rows.size() / 10; i < rows.size(); ++i) times.push_back(rows[i][kStepTimeMs]);
    if (!times.empty()) {
      std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
      r.median_step_ms = times[times.size() / 2];
    }
  }
  // expectations decidable without a reference
  const std::string& want = sc.expect.verdict;
  const auto st = r.outcome.status;
  if (want == "error") {
    r.expectation_met = st == RunOutcome::Status::Error && r.outcome.error == sc.expect.error;
    r.expectation_note = st == RunOutcome::Status::Error ? "raised: " + r.outcome.error : "expected an error, none raised";
  } else if (want == "nonfinite") {
    r.expectation_met = st == RunOutcome::Status::NonFinite;
    r.expectation_note = st == RunOutcome::Status::NonFinite ? "non-finite as expected" : std::string("run ") + status_name(st);
  } else {
    r.expectation_met = st == RunOutcome::Status::Completed;
    r.expectation_note = st == RunOutcome::Status::Completed
                             ? "completed; '" + want + "' is judged against the FP32 reference"
                             : std::string("run ended ") + status_name(st) + (r.outcome.error.empty() ? "" : ": " + r.outcome.error);
  }
  return r;
}

}  // namespace ampcheck::engine
