// The ampcheck subcommands.
#pragma once

#include "run/scenario_run.h"
#include "report/compare.h"
#include "report/summary.h"
#include "scenario/scenario.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ampcheck::cli {

struct RunOptions {
  std::vector<std::string> scenarios;
  std::string suite;
  std::string device;  // empty = the scenario's own (default auto)
  std::string out_dir = "reports/latest";
  std::string references;  // empty = references_dir()
  int64_t steps = 0;
  bool force = false;
  int64_t jobs = 0;  // check: scenarios run at once in separate processes (0 = one per core on the CPU, 1 on a GPU)
  // run / check: "stock" (each scenario's own engine options) or "fast": the engine's fastest path on every scenario
  // where it applies — CUDA graphs (train.cuda_graphs; a step that needs the host stays uncaptured and the report
  // says why), the fused LM head (model.head_loss: fused, GPT models whose head is not FP8), the fused residual
  // add + LayerNorm (model.fused_layernorm), the fused bias gradients / GELU backward (model.fused_bias_gelu; GPT) and
  // the GEMM epilogues (model.gemm_epilogues; GPT), which take the block Linears where they apply.
  std::string engine = "stock";
  std::vector<std::string> tolerance;  // judge: KEY=VALUE overrides of verdict::Tolerance (k, window, ratio_floor, ...)
  bool more_noise = false;             // record: also a second seed and a second data order (6 noise runs)
  bool strict = false;  // check / judge: a warning (a diagnostic beyond its allowance while the outcomes track, a
                        // column never measured, mixed precision not in effect) fails its scenario
};

// A scenario as `opts` runs it: the file, with --engine fast's options applied.
scenario::Scenario load_for_run(const std::string& file, const RunOptions& opts);
// The device it runs on: --device, else the scenario's own.
at::Device run_device(const scenario::Scenario& sc, const RunOptions& opts);

// The scenario files named (files, then --suite's); throws if none.
std::vector<std::string> resolve_scenario_files(const RunOptions& opts);
// Why run and check skip these scenarios here ("" if they do not): --device cuda without a CUDA device, or every
// scenario named data-parallel on CUDA with more ranks than this machine has GPUs. They print "SKIPPED: <why>" and
// exit 77 (CTest's skip code).
std::string why_skipped(const std::vector<std::string>& files, const RunOptions& opts);

int cmd_list(const std::string& suite);
int cmd_run(const RunOptions& opts);     // train, write trajectories, judge error/nonfinite expectations only
int cmd_record(const RunOptions& opts);  // (re)write FP32 references for this device class
int cmd_check(const RunOptions& opts);   // run + compare with references: verdicts, PASS/FAIL, exit 1 on FAIL
int cmd_compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t);
int cmd_report(const std::string& run_dir, bool force);  // report.html from summary.json + trajectories
struct DoctorOptions {
  int64_t allreduce_ranks = -1;  // the all-reduce check's ranks: -1 every GPU (CUDA) or 2 (CPU), 0 none
  double allreduce_mb = 0;       // its buffer, MiB (0: 256 on a GPU, 4 on the CPU)
};
// exit 1 if the smoke test or the all-reduce check fails
int cmd_doctor(const std::string& device, bool json, const DoctorOptions& options = {});
int cmd_default(RunOptions opts);  // check the default suite on the best device
// External runs (judge.cpp): a reference from the user's FP32 run + noise runs; verdicts for runs of other loops.
int cmd_reference(const std::string& fp32_run, const std::vector<std::string>& spread_runs, const std::string& out,
                  bool force);
// Runs one scenario: in this process, or (distributed:) over its ranks (harness/distributed/launcher.h). writes_results
// is false on a joined rank other than 0, which must not write the run directory.
run::ScenarioResult run_any_scenario(const scenario::Scenario& sc, const RunOptions& opts, bool* writes_results,
                                     engine::Trainer::ProgressFn progress);
// The data-parallel part of a result for the reports.
void fill_distributed(report::ScenarioSummary& row, const run::ScenarioResult& r);

int cmd_judge(const std::vector<std::string>& runs, const std::string& reference_path, const std::string& expect,
              const std::string& strategy,
              const RunOptions& opts);  // opts: out_dir, force

// check's parallel path (parallel_check.cpp): each scenario in its own `ampcheck check` process, at most `jobs` at
// once, each with cores / jobs intra-op threads; their summaries merged in the files' order, their trajectories
// moved into opts.out_dir.
struct ParallelResult {
  std::vector<report::ScenarioSummary> rows;
  report::RunSummary header;  // provenance fields from the first scenario that ran
};
ParallelResult check_in_processes(const std::vector<std::string>& files, const RunOptions& opts, int64_t jobs);
int64_t default_jobs(const std::string& device);

std::string file_stem(const std::string& path);  // "dir/run.h5" -> "run"
void make_dirs(const std::string& path);         // mkdir -p
bool file_exists(const std::string& path);

// check's row helpers (record_check.cpp), which validate shares: the summary's provenance from the first scenario, and
// what a run measured into its row (peak_tflops: the measured matmul rate per device class / compute dtype).
void set_provenance(report::RunSummary& summary, const scenario::Scenario& sc, const at::Device& device);
// A scenario's row before it runs: name, strategy, expectation, device class, verdict "-".
report::ScenarioSummary scenario_row(const scenario::Scenario& sc, const at::Device& device);
void fill_measurements(report::ScenarioSummary& row, const run::ScenarioResult& r, const at::Device& device,
                       std::map<std::string, double>& peak_tflops);

// `ampcheck validate` (validate_command.cpp): the validation suite's scenarios against their golden trajectories (bit
// for bit where the stack matches), else statistically against the FP32 references; with --record, the goldens of this
// stack.
struct ValidateOptions {
  std::vector<std::string> plants;  // --plant: planted faults (validate/validate.h parse_plant)
  int64_t replays = 3;              // replays of a differing step
  bool record = false;              // write this stack's goldens instead of comparing
  std::vector<std::string> seal;    // --seal: add the seal (validate/golden.h) to these goldens, from their content
};
int cmd_validate(RunOptions opts, const ValidateOptions& v);

std::string scenarios_dir();   // $AMPCHECK_SCENARIOS, else <source>/scenarios
std::string references_dir();  // $AMPCHECK_REFERENCES, else <source>/references

}  // namespace ampcheck::cli
