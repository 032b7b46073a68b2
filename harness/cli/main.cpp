// ampcheck — command-line entry point. With no subcommand it runs the default suite on the best device
// (the GPU when there is one, else the CPU) and ends with a result table.
#include "cli/commands.h"
#include "distributed/allreduce_check.h"
#include "distributed/launcher.h"

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"ampcheck: mixed-precision training correctness harness"};
  app.require_subcommand(0, 1);
  ampcheck::cli::RunOptions run_opts;

  auto* list = app.add_subcommand("list", "list scenarios (of a suite) and strategies");
  std::string list_suite;
  list->add_option("--suite", list_suite, "suite name (scenarios/suites/<name>.yaml)");

  // the options run, record and check share: what to run, where, how long
  auto add_scenario_options = [&](CLI::App* sub) {
    sub->add_option("scenarios", run_opts.scenarios, "scenario YAML files");
    sub->add_option("--suite", run_opts.suite, "suite name instead of files (scenarios/suites/<name>.yaml)");
    sub->add_option("--device", run_opts.device, "auto | cpu | cuda (default: the scenario's, else auto)");
    sub->add_option("--steps", run_opts.steps, "override train.steps (0 = as in the scenario)");
  };

  // the run directory, for the subcommands that write one
  auto add_output_options = [&](CLI::App* sub) {
    sub->add_option("--out", run_opts.out_dir, "run directory")->default_val("reports/latest");
    sub->add_flag("--force", run_opts.force, "overwrite existing result files");
  };

  auto* run = app.add_subcommand("run", "run scenarios and write trajectories (no reference needed)");
  add_scenario_options(run);
  add_output_options(run);
  run->add_option("--engine", run_opts.engine, "stock | fast (as for check)")->check(CLI::IsMember({"stock", "fast"}));

  auto* record = app.add_subcommand("record", "(re)write the FP32 references of scenarios for this device class");
  add_scenario_options(record);
  record->add_option("--references", run_opts.references, "reference root (default: <source>/references)");
  record->add_flag("--force", run_opts.force, "re-record references that exist");
  record->add_flag("--more-noise", run_opts.more_noise,
                   "six noise runs instead of four: also init seed + 2 and a second data order (for chaotic setups)");

  auto* check = app.add_subcommand("check", "run scenarios, compare with their FP32 references, PASS/FAIL");
  add_scenario_options(check);
  add_output_options(check);
  check->add_option("--engine", run_opts.engine,
                    "stock (each scenario's engine options) | fast: CUDA graphs and the fused kernels wherever they apply")
      ->check(CLI::IsMember({"stock", "fast"}));
  check->add_option("--references", run_opts.references, "reference root (default: <source>/references)");
  check->add_flag("--strict", run_opts.strict,
                  "warnings fail: a diagnostic (zero/subnormal grads, FP8 casts) beyond its allowance while the "
                  "outcomes track, a column never measured, mixed precision not in effect");
  check->add_option("--jobs,-j", run_opts.jobs,
                    "scenarios at once, each in its own process (default: one per core on the CPU, 1 on a GPU)");

  auto* validate = app.add_subcommand(
      "validate", "does this stack compute what a known-good one did? the validation suite against its golden "
                  "trajectories: bit for bit where the stack fingerprint matches, else statistically (and which)");
  ampcheck::cli::ValidateOptions validate_opts;
  add_scenario_options(validate);
  add_output_options(validate);
  validate->add_option("--references", run_opts.references, "reference root with validate/<class>/ goldens (default: <source>/references)");
  validate->add_flag("--record", validate_opts.record, "write this stack's goldens (references/validate/<class>/) instead of comparing");
  validate->add_option("--plant", validate_opts.plants,
                       "plant a fault to prove the checks: bitflip:<param|grad>:<glob>:<element>:<bit>@<step>[:transient], "
                       "tf32, nondeterministic, reduced-reduction, matmul-bf16 (repeatable)");
  validate->add_option("--replays", validate_opts.replays, "replays of the first differing step (default 3)");
  validate->add_flag("--strict", run_opts.strict, "warnings fail the statistical verdict (as for check)");

  auto* compare = app.add_subcommand("compare", "two run directories side by side; exit 1 on a regression");
  std::string run_a, run_b;
  ampcheck::report::CompareThresholds thresholds;
  compare->add_option("RUN_A", run_a, "baseline run directory")->required();
  compare->add_option("RUN_B", run_b, "run directory to judge")->required();
  compare->add_option("--max-slowdown", thresholds.max_slowdown, "step time ratio B/A allowed")->default_val(1.10);
  compare->add_option("--max-memory-growth", thresholds.max_memory_growth, "peak memory ratio B/A allowed")->default_val(1.10);
  compare->add_option("--max-loss-change", thresholds.max_loss_change, "|final loss B/A - 1| allowed")->default_val(0.02);

  auto* report = app.add_subcommand("report", "(re)write report.html and summary.md of a run directory from its summary and trajectories");
  std::string report_dir;
  bool report_force = false;
  report->add_option("RUN_DIR", report_dir, "run directory written by `ampcheck check`")->required();
  report->add_flag("--force", report_force, "replace an existing report.html");

  auto* doctor = app.add_subcommand("doctor", "the numerical stack: device, versions, support, flags, matmul rates, smoke test");
  std::string doctor_device = "auto";
  bool doctor_json = false;
  doctor->add_option("--device", doctor_device, "auto | cpu | cuda");
  doctor->add_flag("--json", doctor_json, "machine-readable output");
  ampcheck::cli::DoctorOptions doctor_opts;
  doctor->add_option("--allreduce-ranks", doctor_opts.allreduce_ranks,
                     "ranks of the all-reduce check (default: every GPU with NCCL, else 2 CPU processes with Gloo; 0: skip)");
  doctor->add_option("--allreduce-mb", doctor_opts.allreduce_mb, "the all-reduce check's buffer, MiB (default 256 GPU, 4 CPU)");

  auto* judge = app.add_subcommand("judge", "verdicts for runs of your own training loop (docs/TRAJECTORY_FORMAT.md) against a reference");
  std::vector<std::string> judge_runs;
  std::string judge_reference, judge_expect, judge_strategy;
  judge->add_option("RUN", judge_runs, "trajectory files (.h5 or .jsonl)")->required();
  judge->add_option("--reference", judge_reference, "reference file (from `ampcheck reference` or `ampcheck record`)")->required();
  judge->add_option("--expect", judge_expect, "the expected verdict (default: the run's 'expect' attribute, else tracks)")
      ->check(CLI::IsMember({"tracks", "diverges", "stalls", "nonfinite", "error"}));
  judge->add_option("--strategy", judge_strategy, "the strategy family shown for every run (default: the run's "
                                                  "'strategy' attribute)");
  judge->add_flag("--strict", run_opts.strict, "warnings fail (as for check)");
  judge->add_option("--tolerance", run_opts.tolerance,
                    "KEY=VALUE: a verdict constant other than the calibrated default (k, window, ratio_floor, "
                    "fraction_floor, max_skipped_fraction; docs/TOLERANCE.md), e.g. for a calibration sweep");
  add_output_options(judge);

  auto* ref_cmd = app.add_subcommand("reference", "a reference from your own FP32 run and a few more FP32 runs that give the noise");
  std::string ref_run, ref_out;
  std::vector<std::string> ref_spread;
  bool ref_force = false;
  ref_cmd->add_option("FP32_RUN", ref_run, "the FP32 run (.h5 or .jsonl)")->required();
  ref_cmd->add_option("--spread", ref_spread,
                      "FP32 runs that differ from FP32_RUN by one perturbation, each [KIND:]FILE with KIND seed (another "
                      "init seed), order (another data order) or ulp (weights nudged by an ulp); without KIND: the "
                      "file's 'perturbation' attribute (the recorder's perturbation=...). At least one seed or order run")
      ->required();
  ref_cmd->add_option("--out", ref_out, "the reference file to write")->required();
  ref_cmd->add_flag("--force", ref_force, "replace an existing reference file");

  // one rank of a data-parallel run started by ampcheck itself (harness/distributed/launcher.h); not for users
  auto* rank_cmd = app.add_subcommand("_rank", "")->group("");
  std::string rank_scenario, rank_out, rank_device;
  int64_t rank_steps = 0;
  rank_cmd->add_option("SCENARIO", rank_scenario)->required();
  rank_cmd->add_option("--out", rank_out)->required();
  rank_cmd->add_option("--device", rank_device);
  rank_cmd->add_option("--steps", rank_steps);

  // one rank of doctor's all-reduce check (harness/distributed/allreduce_check.h); not for users
  auto* allreduce_cmd = app.add_subcommand("_allreduce", "")->group("");
  std::string allreduce_backend;
  int64_t allreduce_bytes = 0, allreduce_iterations = 0;
  double allreduce_timeout = 120;
  allreduce_cmd->add_option("--backend", allreduce_backend)->required();
  allreduce_cmd->add_option("--bytes", allreduce_bytes)->required();
  allreduce_cmd->add_option("--iterations", allreduce_iterations)->required();
  allreduce_cmd->add_option("--timeout", allreduce_timeout);

  CLI11_PARSE(app, argc, argv);
  if (*allreduce_cmd)
    return ampcheck::dist::allreduce_rank_main(allreduce_backend, allreduce_bytes, allreduce_iterations, allreduce_timeout);
  if (*rank_cmd) return ampcheck::dist::rank_main(rank_scenario, rank_device, rank_steps, rank_out);
  try {
    if (*list) return ampcheck::cli::cmd_list(list_suite);
    if (*run) return ampcheck::cli::cmd_run(run_opts);
    if (*record) return ampcheck::cli::cmd_record(run_opts);
    if (*check) return ampcheck::cli::cmd_check(run_opts);
    if (*validate) return ampcheck::cli::cmd_validate(run_opts, validate_opts);
    if (*compare) return ampcheck::cli::cmd_compare(run_a, run_b, thresholds);
    if (*report) return ampcheck::cli::cmd_report(report_dir, report_force);
    if (*doctor) return ampcheck::cli::cmd_doctor(doctor_device, doctor_json, doctor_opts);
    if (*judge) return ampcheck::cli::cmd_judge(judge_runs, judge_reference, judge_expect, judge_strategy, run_opts);
    if (*ref_cmd) return ampcheck::cli::cmd_reference(ref_run, ref_spread, ref_out, ref_force);
    return ampcheck::cli::cmd_default(run_opts);
  } catch (const std::exception& e) {
    std::cerr << "ampcheck: " << e.what() << "\n";
    return 2;
  }
}
