// A run summary's rows and header as the use cases fill them: a scenario's row before it runs, what its run measured,
// its data-parallel part, what an external recording measured, and the summary's provenance; then the run directory's
// reports written and published.
#pragma once

#include "usecases/usecases.h"

#include "trajectory/trajectory_file.h"
#include "report/summary.h"
#include "run/scenario_run.h"
#include "scenario/scenario.h"

#include <map>
#include <string>

namespace ampcheck::usecases {

class RunDirectory;

// The run summary's provenance, on the first scenario's device (run::machine_provenance): versions, the device, the
// date, the commit.
void set_provenance(report::RunSummary& summary, const at::Device& device);
// A scenario's row before it runs: name, strategy, expectation, device class, verdict "-".
report::ScenarioSummary scenario_row(const scenario::Scenario& sc, const at::Device& device);
// The device's matmul peak per compute dtype (doctor::measured_matmul_tflops), each measured once — the first time a
// run that measured its throughput asks — and kept: the denominator of the rows' MFU. A use case holds one for its
// whole run and passes each row's peak to fill_measurements as a number.
class MatmulPeaks {
 public:
  // TFLOP/s of the run's compute dtype on `device`; NaN, with nothing measured, for a run without a throughput.
  double tflops_for(const run::ScenarioResult& r, const at::Device& device);

 private:
  std::map<std::string, double> measured_;  // device class / compute dtype -> TFLOP/s
};
// What a run measured, into its row: steps, losses, workload, step times, throughput, memory, engine path, and the MFU
// against `peak_tflops` (MatmulPeaks::tflops_for). It measures nothing itself.
void fill_measurements(report::ScenarioSummary& row, const run::ScenarioResult& r, double peak_tflops);
// The data-parallel part of a result.
void fill_distributed(report::ScenarioSummary& row, const run::ScenarioResult& r);
// What an external run measured, into its row: step times from its step_time_ms column (the median after warm-up),
// tokens / samples per second where it recorded tokens_per_step / samples_per_step, its workload (`workload` or
// `run_key`) and the dtype its matmuls ran in (autocast, else the parameters').
void fill_recorded_measurements(report::ScenarioSummary& row, const trajectory::TrajectoryFile& run);

// The four reports (summary.json, junit.xml, summary.md, report.html) into the staging directory, then the run
// directory published: result.reports_dir is where it now is.
void publish_reports(RunDirectory& out, SuiteResult& result);

}  // namespace ampcheck::usecases
