// A run summary's rows and header as the use cases fill them, and the run directory's reports (result_rows.h).
#include "usecases/result_rows.h"

#include "usecases/run_directory.h"

#include "doctor/doctor.h"
#include "engine/device.h"
#include "report/html.h"
#include "run/provenance.h"
#include "verdict/kind.h"

#include <cmath>
#include <cstdlib>

namespace ampcheck::usecases {

report::ScenarioSummary scenario_row(const scenario::Scenario& sc, const at::Device& device) {
  report::ScenarioSummary row;
  row.name = sc.run.name;
  row.strategy = sc.run.strategy.name;
  row.expect = sc.expect.verdict;
  row.verdict = verdict::kNoVerdict;
  row.device_class = engine::device_info(device).device_class;
  return row;
}

void set_provenance(report::RunSummary& summary, const at::Device& device) {
  const auto prov = run::machine_provenance(device);
  summary.ampcheck_version = *prov.ampcheck_version;
  summary.libtorch_version = *prov.libtorch_version;
  summary.cuda_version = *prov.cuda_version;
  summary.device_name = *prov.device_name;
  summary.device_class = *prov.device_class;
  summary.date = *prov.date;
  if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) summary.git_commit = commit;
}

namespace {
double tflops_of(const run::ScenarioResult& r) {  // NaN: the run measured no throughput
  const double steps_per_s = 1000.0 / r.timing.median_ms;
  return r.flops_per_step * steps_per_s / 1e12;
}
}  // namespace

double MatmulPeaks::tflops_for(const run::ScenarioResult& r, const at::Device& device) {
  if (!std::isfinite(tflops_of(r))) return NAN;
  const std::string key = engine::device_info(device).device_class + "/" + r.compute_dtype;
  if (!measured_.count(key)) measured_[key] = doctor::measured_matmul_tflops(device, r.compute_dtype);
  return measured_[key];
}

void fill_measurements(report::ScenarioSummary& row, const run::ScenarioResult& r, double peak_tflops) {
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
  row.tflops = tflops_of(r);
  if (std::isfinite(row.tflops)) {
    row.peak_tflops = peak_tflops;
    row.mfu = row.tflops / row.peak_tflops;
  }
  row.peak_memory_bytes = r.peak_memory_bytes;
  row.peak_reserved_bytes = r.peak_reserved_bytes;
  row.engine = r.engine;
  for (const auto& d : r.engine_plan) row.engine_plan.push_back({d.option, d.label, d.note, d.applied});
}

void fill_distributed(report::ScenarioSummary& row, const run::ScenarioResult& r) {
  const auto& d = r.distributed;
  auto& o = row.distributed;
  o.world_size = d.world_size;
  o.backend = d.backend;
  o.sharding = d.sharding;
  o.reduce_dtype = d.reduce_dtype;
  o.launch = d.launch;
  o.rank_files = d.rank_files;
  o.rank_median_step_ms = d.rank_median_step_ms;
  o.rank_collective_share = d.rank_collective_share;
  o.consistency_checks = d.consistency_checks;
  o.diverged_step = d.diverged_step;
  o.consistency = d.consistency;
}

void fill_recorded_measurements(report::ScenarioSummary& row, const trajectory::TrajectoryFile& run) {
  using trajectory::text_or;
  const auto& a = run.attributes;
  const auto timing = run::step_timing(run.trajectory, text_or(a.timing_method, "wall-clock (recorder)"));
  row.timing_method = timing.method;
  row.warmup_steps = timing.warmup_steps;
  row.median_step_ms = timing.median_ms;
  row.p10_step_ms = timing.p10_ms;
  row.p90_step_ms = timing.p90_ms;
  // a number a training script wrote as text: NaN unless it is a positive number, whole
  auto number = [&](const trajectory::RunAttributes::Text& text) -> double {
    try {
      const std::string v = text_or(text);
      size_t used = 0;
      const double x = v.empty() ? NAN : std::stod(v, &used);
      return used == v.size() && x > 0 ? x : NAN;
    } catch (const std::exception&) {
      return NAN;
    }
  };
  const double steps_per_s = 1000.0 / timing.median_ms;
  row.tokens_per_s = number(a.tokens_per_step) * steps_per_s;
  row.samples_per_s = number(a.samples_per_step) * steps_per_s;
  row.workload = text_or(a.workload, text_or(a.run_key));
  if (const double peak = number(a.peak_memory_bytes); std::isfinite(peak))  // the recorder's, on CUDA
    row.peak_memory_bytes = static_cast<int64_t>(peak);
  const std::string autocast = text_or(a.autocast_dtype);
  const std::string params = text_or(a.param_dtype);
  row.compute_dtype = autocast == "float16"    ? "fp16"
                      : autocast == "bfloat16" ? "bf16"
                      : params == "float16"    ? "fp16"
                      : params == "bfloat16"   ? "bf16"
                      : params == "float32"    ? "fp32"
                                               : "";
}

void publish_reports(RunDirectory& out, SuiteResult& result) {
  report::write_run_reports(out.staging(), result.summary);
  report::write_html_report(out.staging(), result.summary);
  out.publish();
  result.reports_dir = out.final_dir();
}

int SuiteResult::exit_code() const {
  if (!skipped.empty()) return 77;
  if (!written) return 0;
  return summary.failed() == 0 ? 0 : 1;
}

int RunResult::failures() const {
  int n = 0;
  for (const auto& r : results) n += !r.expectation_met;
  return n;
}

}  // namespace ampcheck::usecases
