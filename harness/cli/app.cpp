// The command line (app.h): the subcommands, their options and the bounds of every numeric one.
#include "cli/app.h"

#include "distributed/allreduce_check.h"
#include "distributed/launcher.h"
#include "engine/cpu_capability.h"

#include "io/text.h"
#include "verdict/kind.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <vector>

namespace ampcheck::cli {

namespace {

// Steps of a run: as a scenario's train.steps (scenario/scenario.cpp's limit).
constexpr double kMaxSteps = 10'000'000;

// A number option's bound in a message: a whole number in full ("10000000", where a stream writes "1e+07"), any
// other as a stream writes it.
std::string bound_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return io::number_text(v, 6);  // a stream's default precision
}

}  // namespace

struct CommandLine::State {
  CLI::App app{"ampcheck: mixed-precision training correctness harness"};
  CLI::App *list = nullptr, *run = nullptr, *record = nullptr, *check = nullptr, *validate = nullptr,
           *compare = nullptr, *report = nullptr, *doctor = nullptr, *judge = nullptr, *ref_cmd = nullptr,
           *rank_cmd = nullptr, *allreduce_cmd = nullptr, *sweep = nullptr, *localize = nullptr;
  usecases::SweepOptions sweep_opts;
  usecases::LocalizeOptions localize_opts;
  std::string sweep_strategies;
  std::string list_suite;
  ValidateOptions validate_opts;
  std::string run_a, run_b;
  report::CompareThresholds thresholds;
  std::string report_dir;
  bool report_force = false;
  std::string doctor_device = "auto";
  bool doctor_json = false;
  DoctorOptions doctor_opts;
  std::vector<std::string> judge_runs;
  std::string judge_reference, judge_expect, judge_strategy;
  int64_t judge_first_steps = 0;
  std::string ref_run, ref_out;
  std::vector<std::string> ref_spread;
  bool ref_force = false;
  std::string rank_scenario, rank_out, rank_device;
  int64_t rank_steps = 0;
  std::string allreduce_backend;
  int64_t allreduce_bytes = 0, allreduce_iterations = 0;
  double allreduce_timeout = 120;

  struct Bounded {
    CLI::Option* option;
    std::string name;
    double min, max;
    std::function<double()> value;
  };
  std::vector<Bounded> bounded;

  // A numeric option with its range: a non-number, NaN, an infinity or a value outside [lo, hi] is refused while
  // parsing, with the option's name and what was expected.
  template <typename T>
  CLI::Option* number(CLI::App* sub, const std::string& flags, T& target, const std::string& help, double lo,
                      double hi) {
    CLI::Option* o = sub->add_option(flags, target, help);
    o->check(CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
          double v = NAN;
          size_t used = 0;
          try {
            v = std::stod(text, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used == 0 || used != text.size()) return "expected a number, got '" + text + "'";
          if (!std::isfinite(v) || v < lo || v > hi)
            return "expected a number from " + bound_text(lo) + " to " + bound_text(hi) + ", got '" + text + "'";
          return std::string();
        },
        "NUMBER in [" + bound_text(lo) + ", " + bound_text(hi) + "]"));
    bounded.push_back({o, sub->get_name() + " " + flags, lo, hi, [&target] { return static_cast<double>(target); }});
    return o;
  }
};

// ---------------------------------------------------------------------------------------------------------------------
// the subcommands, each with its options (CommandLine's constructor adds them in this order)

namespace {

// the options run, record, check and validate share: what to run, where, how long
void add_scenario_options(CommandLine::State& s, RunOptions& run_opts, CLI::App* sub) {
  sub->add_option("scenarios", run_opts.scenarios, "scenario YAML files");
  sub->add_option("--suite", run_opts.suite, "suite name instead of files (scenarios/suites/<name>.yaml)");
  sub->add_option("--device", run_opts.device, "auto | cpu | cuda (default: the scenario's, else auto)");
  s.number(sub, "--steps", run_opts.steps, "override train.steps (0 = as in the scenario)", 0, kMaxSteps);
}

// the run directory, for the subcommands that write one
void add_output_options(RunOptions& run_opts, CLI::App* sub) {
  sub->add_option("--out", run_opts.out_dir, "run directory")->default_val("reports/latest");
  sub->add_flag("--force", run_opts.force, "overwrite existing result files");
}

// run, record, check: the engine's scenarios
void add_scenario_commands(CommandLine::State& s, RunOptions& run_opts) {
  s.run = s.app.add_subcommand("run", "run scenarios and write trajectories (no reference needed)");
  add_scenario_options(s, run_opts, s.run);
  add_output_options(run_opts, s.run);
  s.run->add_option("--engine", run_opts.engine, "stock | fast (as for check)")
      ->check(CLI::IsMember({"stock", "fast"}));

  s.record = s.app.add_subcommand("record", "(re)write the FP32 references of scenarios for this device class");
  add_scenario_options(s, run_opts, s.record);
  s.record->add_option("--references", run_opts.references, "reference root (default: <source>/references)");
  s.record->add_flag("--force", run_opts.force, "re-record references that exist");
  s.record->add_flag("--more-noise", run_opts.more_noise,
                     "six noise runs instead of four: also init seed + 2 and a second data order (for chaotic setups)");

  s.check = s.app.add_subcommand("check", "run scenarios, compare with their FP32 references, PASS/FAIL");
  add_scenario_options(s, run_opts, s.check);
  add_output_options(run_opts, s.check);
  s.check
      ->add_option(
          "--engine", run_opts.engine,
          "stock (each scenario's engine options) | fast: CUDA graphs and the fused kernels wherever they apply")
      ->check(CLI::IsMember({"stock", "fast"}));
  s.check->add_option("--references", run_opts.references, "reference root (default: <source>/references)");
  s.check->add_flag("--strict", run_opts.strict,
                    "warnings fail: a diagnostic (zero/subnormal grads, FP8 casts) beyond its allowance while the "
                    "outcomes track, a column never measured, mixed precision not in effect");
  s.number(s.check, "--jobs,-j", run_opts.jobs,
           "scenarios at once, each in its own process (default: one per core on the CPU, 1 on a GPU)", 0, 256);
}

// validate: this stack against its goldens, one process or a fleet of ranks
void add_validate(CommandLine::State& s, RunOptions& run_opts) {
  s.validate = s.app.add_subcommand(
      "validate",
      "does this stack compute what a known-good one did? the validation suite against its golden "
      "trajectories: bit for bit where the stack fingerprint matches, else statistically (and which)");
  add_scenario_options(s, run_opts, s.validate);
  add_output_options(run_opts, s.validate);
  s.validate->add_option("--references", run_opts.references,
                         "reference root with validate/<class>/ goldens (default: <source>/references)");
  s.validate->add_flag("--record", s.validate_opts.record,
                       "write this stack's goldens (references/validate/<class>/) instead of comparing");
  s.validate->add_option(
      "--plant", s.validate_opts.plants,
      "plant a fault to prove the checks: bitflip:<param|grad>:<glob>:<element>:<bit>@<step>[:transient], "
      "tf32, nondeterministic, reduced-reduction, matmul-bf16 (repeatable)");
  s.validate->add_option("--seal", s.validate_opts.seal,
                         "add the content checksum, config hash and step count to goldens recorded before they "
                         "existed, from each file's own content (trusted goldens only; repeatable); nothing trains");
  s.number(s.validate, "--replays", s.validate_opts.replays,
           "replays of the first differing step (default 3; at least 2: a fault that varies shows between replays)", 2,
           100);
  s.validate->add_flag("--strict", run_opts.strict, "warnings fail the statistical verdict (as for check)");
  s.validate->add_flag("--fleet", s.validate_opts.fleet,
                       "this process is one rank of a torchrun / srun job: every rank runs the suite, the ranks vote "
                       "within groups of one stack fingerprint, outliers are named and replayed; rank 0 writes --out");
  s.number(s.validate, "--repeat", s.validate_opts.repeat,
           "--fleet: run the suite N times, counting per rank how often it disagreed (default once)", 1, 1e6);
  s.number(s.validate, "--duration", s.validate_opts.duration_s,
           "--fleet: repeat until S seconds have passed on rank 0 (at least once; at most --repeat times if given)", 1,
           30 * 86400.0);
  s.validate->add_option("--plant-rank", s.validate_opts.plant_ranks,
                         "--fleet: R[/K]:<plant> plants a --plant on rank R (in repetition K only) (repeatable)");
  s.number(s.validate, "--fleet-timeout", s.validate_opts.fleet_timeout_s,
           "--fleet: seconds a rank waits at an exchange for others that are alive but slower (default 1800)", 1,
           86400);
  s.number(s.validate, "--fleet-lost-after", s.validate_opts.fleet_lost_after_s,
           "--fleet: a rank whose heartbeat has not changed for S seconds is named lost (died or stopped answering) "
           "and the repetitions done are reported (default 60)",
           2, 86400);
}

// compare and report: run directories already written
void add_compare_and_report(CommandLine::State& s) {
  s.compare = s.app.add_subcommand("compare", "two run directories side by side; exit 1 on a regression");
  s.compare->add_option("RUN_A", s.run_a, "baseline run directory")->required();
  s.compare->add_option("RUN_B", s.run_b, "run directory to judge")->required();
  s.number(s.compare, "--max-slowdown", s.thresholds.max_slowdown, "step time ratio B/A allowed", 0, 1e6)
      ->default_val(1.10);
  s.number(s.compare, "--max-memory-growth", s.thresholds.max_memory_growth, "peak memory ratio B/A allowed", 0, 1e6)
      ->default_val(1.10);
  s.number(s.compare, "--max-loss-change", s.thresholds.max_loss_change, "|final loss B/A - 1| allowed", 0, 1e6)
      ->default_val(0.02);

  s.report = s.app.add_subcommand(
      "report", "(re)write report.html and summary.md of a run directory from its summary and trajectories");
  s.report->add_option("RUN_DIR", s.report_dir, "run directory written by `ampcheck check`")->required();
  s.report->add_flag("--force", s.report_force, "replace an existing report.html");
}

// doctor: the numerical stack
void add_doctor(CommandLine::State& s) {
  s.doctor =
      s.app.add_subcommand("doctor", "the numerical stack: device, versions, support, flags, matmul rates, smoke test");
  s.doctor->add_option("--device", s.doctor_device, "auto | cpu | cuda");
  s.doctor->add_flag("--json", s.doctor_json, "machine-readable output");
  s.number(s.doctor, "--allreduce-ranks", s.doctor_opts.allreduce_ranks,
           "ranks of the all-reduce check (default: every GPU with NCCL, else 2 CPU processes with Gloo; 0: skip)", 0,
           64);
  s.number(s.doctor, "--allreduce-mb", s.doctor_opts.allreduce_mb,
           "the all-reduce check's buffer, MiB (default 256 GPU, 4 CPU)", 1.0 / 1024, 1 << 20);
}

// judge and reference: recordings of the user's own training loop
void add_judge_and_reference(CommandLine::State& s, RunOptions& run_opts) {
  s.judge = s.app.add_subcommand(
      "judge", "verdicts for runs of your own training loop (docs/TRAJECTORY_FORMAT.md) against a reference");
  s.judge->add_option("RUN", s.judge_runs, "trajectory files (.h5 or .jsonl)")->required();
  s.judge
      ->add_option("--reference", s.judge_reference, "reference file (from `ampcheck reference` or `ampcheck record`)")
      ->required();
  s.judge
      ->add_option("--expect", s.judge_expect,
                   "the expected verdict (default: the run's 'expect' attribute, else tracks)")
      ->check(CLI::IsMember(verdict::kind_words()));
  s.judge->add_option("--strategy", s.judge_strategy,
                      "the strategy family shown for every run (default: the run's 'strategy' attribute)");
  s.judge->add_flag("--strict", run_opts.strict, "warnings fail (as for check)");
  s.number(s.judge, "--first-steps", s.judge_first_steps,
           "judge only each run's first N steps, as a partial run (what ampcheck.judge(steps=N) does)", 1, kMaxSteps);
  s.judge
      ->add_option("--tolerance", run_opts.tolerance,
                   "KEY=VALUE: a verdict constant other than the calibrated default (k, window, ratio_floor, "
                   "fraction_floor, max_skipped_fraction; docs/TOLERANCE.md), e.g. for a calibration sweep")
      ->check(CLI::Validator(
          [](std::string& kv) -> std::string {
            try {
              parse_tolerance_overrides({kv});
            } catch (const std::exception& e) {
              return e.what();
            }
            return std::string();
          },
          "KEY=VALUE"));
  add_output_options(run_opts, s.judge);

  s.ref_cmd = s.app.add_subcommand("reference",
                                   "a reference from your own FP32 run and a few more FP32 runs that give the noise");
  s.ref_cmd->add_option("FP32_RUN", s.ref_run, "the FP32 run (.h5 or .jsonl)")->required();
  s.ref_cmd
      ->add_option("--spread", s.ref_spread,
                   "FP32 runs that differ from FP32_RUN by one perturbation, each [KIND:]FILE with KIND seed "
                   "(another init seed), order (another data order), ulp (weights nudged by an ulp) or skip (the "
                   "first optimizer step not taken); without KIND: the file's 'perturbation' attribute (the "
                   "recorder's perturbation=...). At least one seed or order run")
      ->required();
  s.ref_cmd->add_option("--out", s.ref_out, "the reference file to write")->required();
  s.ref_cmd->add_flag("--force", s.ref_force, "replace an existing reference file");
}

// sweep: the user's training command under each strategy
void add_sweep(CommandLine::State& s) {
  s.sweep = s.app.add_subcommand(
      "sweep",
      "which precision is safe and fastest for YOUR model: runs your training command once per strategy (plus three "
      "FP32 runs) and judges each; usage: ampcheck sweep [options] -- python train.py ...");
  s.sweep->add_option("COMMAND", s.sweep_opts.command, "your training command, after --")->required();
  s.sweep->add_option("--out", s.sweep_opts.out_dir, "the sweep directory (resumable; default sweep)");
  s.number(s.sweep, "--steps", s.sweep_opts.steps, "every run's step limit (default: the script's own)", 1, kMaxSteps);
  // one argument, split on commas (a list option would end at the `--` before the command and leave the command's
  // own options to this parser)
  s.sweep
      ->add_option("--strategies", s.sweep_strategies,
                   "the candidates, comma-separated (default: every one the device supports): tf32, bf16-autocast, "
                   "fp16-autocast-scaler, pure-bf16, fp16-master-weights, fp8")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text.empty() || text.back() == ',')
              return "'" + text +
                     "': an empty strategy name (leave --strategies out for every strategy the device supports)";
            std::stringstream list(text);
            std::vector<std::string> seen;
            for (std::string name; std::getline(list, name, ',');) {
              if (name.empty()) return "'" + text + "': an empty strategy name (two commas, or a comma at either end)";
              if (std::find(seen.begin(), seen.end(), name) != seen.end())
                return "'" + name + "' is named twice (each strategy runs once)";
              seen.push_back(name);
              if (name != "tf32" && name != "bf16-autocast" && name != "fp16-autocast-scaler" && name != "pure-bf16" &&
                  name != "fp16-master-weights" && name != "fp8")
                return "'" + name +
                       "' is not a strategy the sweep knows (tf32, bf16-autocast, fp16-autocast-scaler, pure-bf16, "
                       "fp16-master-weights, fp8)";
            }
            return std::string();
          },
          "LIST"));
  s.sweep->add_option("--device", s.sweep_opts.device, "auto (CUDA when present), cpu or cuda: which strategies apply")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  s.sweep->add_flag("--localize", s.sweep_opts.localize,
                    "for every failing strategy, bisect the modules and name those to keep in FP32");
  s.number(s.sweep, "--probe-steps", s.sweep_opts.probe_steps,
           "a localization probe's steps (default: the run's own; for a long run that diverges, up to the first "
           "divergence + 25%, at least 100)",
           1, kMaxSteps);
  s.number(s.sweep, "--timeout", s.sweep_opts.timeout_s, "seconds per run before it is stopped (default: none)", 1,
           1e7);
  s.number(s.sweep, "--timing-rounds", s.sweep_opts.timing_rounds,
           "rounds of short timing re-runs interleaved with FP32 where a strategy's speed is within the FP32 runs' "
           "spread (default 3; 0: none, the ranking stays 'not decisive')",
           0, 20);
  s.sweep->add_flag("--force", s.sweep_opts.force, "train every run again, the cached FP32 runs included");
  s.sweep->add_flag("--strict", s.sweep_opts.strict, "warnings fail (as for check)");
}

// localize: which modules a failing scenario must keep in FP32
void add_localize(CommandLine::State& s) {
  s.localize = s.app.add_subcommand(
      "localize",
      "for a scenario whose strategy fails against its FP32 reference: which modules to keep in FP32 for it to track "
      "(sweep --localize's bisection, each probe the scenario with model.keep_fp32 set)");
  s.localize->add_option("scenarios", s.localize_opts.run.scenarios, "scenario YAML files")->required();
  s.localize->add_option("--device", s.localize_opts.run.device, "auto | cpu | cuda (default: the scenario's)");
  s.localize->add_option("--out", s.localize_opts.run.out_dir, "run directory")->default_val("reports/latest");
  s.localize->add_flag("--force", s.localize_opts.run.force, "overwrite existing result files");
  s.localize->add_option("--references", s.localize_opts.run.references,
                         "reference root (default: <source>/references)");
  s.number(s.localize, "--probe-steps", s.localize_opts.probe_steps,
           "a probe's steps (default: the run's own; for a run over 100 steps that diverges, up to the first "
           "divergence + 25%, at least 100); the learning-rate schedule stays the run's",
           1, kMaxSteps);
  s.localize->add_flag("--strict", s.localize_opts.run.strict, "warnings fail a probe (as for check)");
}

// _rank and _allreduce: the processes ampcheck starts itself, not for users
void add_internal_commands(CommandLine::State& s) {
  // one rank of a data-parallel run started by ampcheck itself (harness/distributed/launcher.h); not for users
  s.rank_cmd = s.app.add_subcommand("_rank", "")->group("");
  s.rank_cmd->add_option("SCENARIO", s.rank_scenario)->required();
  s.rank_cmd->add_option("--out", s.rank_out)->required();
  s.rank_cmd->add_option("--device", s.rank_device);
  s.number(s.rank_cmd, "--steps", s.rank_steps, "", 0, kMaxSteps);

  // one rank of doctor's all-reduce check (harness/distributed/allreduce_check.h); not for users
  s.allreduce_cmd = s.app.add_subcommand("_allreduce", "")->group("");
  s.allreduce_cmd->add_option("--backend", s.allreduce_backend)->required();
  s.number(s.allreduce_cmd, "--bytes", s.allreduce_bytes, "", 4, static_cast<double>(1ll << 40))->required();
  s.number(s.allreduce_cmd, "--iterations", s.allreduce_iterations, "", 1, 1e6)->required();
  s.number(s.allreduce_cmd, "--timeout", s.allreduce_timeout, "", 1, 86400);
}

}  // namespace

CommandLine::CommandLine() : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.app.require_subcommand(0, 1);
  s.list = s.app.add_subcommand("list", "list scenarios (of a suite) and strategies");
  s.list->add_option("--suite", s.list_suite, "suite name (scenarios/suites/<name>.yaml)");
  add_scenario_commands(s, run_opts_);
  add_validate(s, run_opts_);
  add_compare_and_report(s);
  add_doctor(s);
  add_judge_and_reference(s, run_opts_);
  add_sweep(s);
  add_localize(s);
  add_internal_commands(s);
}

CommandLine::~CommandLine() = default;

int CommandLine::parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  try {
    s_->app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = s_->app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  return -1;
}

int CommandLine::run(std::ostream& err) {
  State& s = *s_;
  // before any ATen kernel runs: ATen trusts ATEN_CPU_CAPABILITY, and a capability this CPU lacks ends in SIGILL
  if (const std::string why = engine::check_requested_cpu_capability(); !why.empty()) {
    err << "ampcheck: " << why << "\n";
    return 2;
  }
  if (*s.allreduce_cmd)
    return distributed::allreduce_rank_main(s.allreduce_backend, s.allreduce_bytes, s.allreduce_iterations,
                                            s.allreduce_timeout);
  if (*s.rank_cmd) return distributed::rank_main(s.rank_scenario, s.rank_device, s.rank_steps, s.rank_out);
  try {
    if (*s.list) return cmd_list(s.list_suite);
    if (*s.run) return cmd_run(run_opts_);
    if (*s.record) return cmd_record(run_opts_);
    if (*s.check) return cmd_check(run_opts_);
    if (*s.validate) return cmd_validate(run_opts_, s.validate_opts);
    if (*s.compare) return cmd_compare(s.run_a, s.run_b, s.thresholds);
    if (*s.report) return cmd_report(s.report_dir, s.report_force);
    if (*s.doctor) return cmd_doctor(s.doctor_device, s.doctor_json, s.doctor_opts);
    if (*s.judge)
      return cmd_judge({s.judge_runs, s.judge_reference, s.judge_expect, s.judge_strategy,
                        parse_tolerance_overrides(run_opts_.tolerance), s.judge_first_steps},
                       run_opts_);
    if (*s.sweep) {
      std::stringstream list(s.sweep_strategies);
      for (std::string name; std::getline(list, name, ',');) s.sweep_opts.strategies.push_back(name);
      return cmd_sweep(s.sweep_opts);
    }
    if (*s.localize) return cmd_localize(s.localize_opts);
    if (*s.ref_cmd) return cmd_reference({s.ref_run, s.ref_spread, s.ref_out, s.ref_force});
    return cmd_default(run_opts_);
  } catch (const std::exception& e) {
    // printable (io/text.h): a message may quote a file's bytes or a path; an escape sequence never reaches the
    // terminal
    err << "ampcheck: " << io::printable_text(e.what()) << "\n";
    return 2;
  }
}

std::vector<CommandLine::Numeric> CommandLine::numeric_values() const {
  std::vector<Numeric> out;
  for (const auto& b : s_->bounded) out.push_back({b.name, b.value(), b.min, b.max, b.option->count() > 0});
  return out;
}

std::string CommandLine::subcommand() const {
  const auto subs = s_->app.get_subcommands();
  return subs.empty() ? std::string() : subs.front()->get_name();
}

verdict::Tolerance parse_tolerance_overrides(const std::vector<std::string>& overrides) {
  verdict::Tolerance tol;
  for (const auto& kv : overrides) {
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq == std::string::npos ? kv.size() : eq);
    double value = NAN;
    try {
      size_t used = 0;
      if (eq != std::string::npos) value = std::stod(kv.substr(eq + 1), &used);
      if (eq + 1 + used != kv.size()) value = NAN;
    } catch (const std::exception&) {
    }
    if (!std::isfinite(value) || value <= 0 || value > 1e6)
      throw std::runtime_error("--tolerance " + kv + ": expected KEY=VALUE with a positive number (at most 1e6)");
    if (key == "k") tol.k = value;
    else if (key == "window" && value >= 1 && value == std::floor(value))
      tol.window = static_cast<int64_t>(value);
    else if (key == "ratio_floor" && value >= 1)
      tol.ratio_floor = value;
    else if (key == "fraction_floor" && value < 1)
      tol.fraction_floor = value;
    else if (key == "max_skipped_fraction" && value <= 1)
      tol.max_skipped_fraction = value;
    else
      throw std::runtime_error("--tolerance " + kv +
                               ": expected k, window (a whole number of steps), ratio_floor "
                               "(>= 1), fraction_floor (< 1) or max_skipped_fraction (<= 1)");
  }
  return tol;
}

}  // namespace ampcheck::cli
