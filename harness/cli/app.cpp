// The command line (app.h): the subcommands, their options and the bounds of every numeric one.
#include "cli/app.h"

#include "cli/options.h"

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
  // each command's options (cli/options.h), filled by its add_* function below and read by its branch of run()
  ListArgs list_args;
  ScenarioArgs run_args, record_args, check_args;
  ValidateArgs validate_args;
  CompareArgs compare_args;
  ReportArgs report_args;
  DoctorArgs doctor_args;
  JudgeArgs judge_args;
  ReferenceArgs reference_args;
  SweepArgs sweep_args;
  LocalizeArgs localize_args;
  RankArgs rank_args;
  AllreduceArgs allreduce_args;

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

// run: the engine's scenarios, trajectories only
void add_run(CommandLine::State& s) {
  RunOptions& run_opts = s.run_args.run;
  s.run = s.app.add_subcommand("run", "run scenarios and write trajectories (no reference needed)");
  add_scenario_options(s, run_opts, s.run);
  add_output_options(run_opts, s.run);
  s.run->add_option("--engine", run_opts.engine, "stock | fast (as for check)")
      ->check(CLI::IsMember({"stock", "fast"}));
}

// record: the FP32 references of scenarios
void add_record(CommandLine::State& s) {
  RunOptions& run_opts = s.record_args.run;
  s.record = s.app.add_subcommand("record", "(re)write the FP32 references of scenarios for this device class");
  add_scenario_options(s, run_opts, s.record);
  s.record->add_option("--references", run_opts.references, "reference root (default: <source>/references)");
  s.record->add_flag("--force", run_opts.force, "re-record references that exist");
  s.record->add_flag("--more-noise", run_opts.more_noise,
                     "six noise runs instead of four: also init seed + 2 and a second data order (for chaotic setups)");
}

// check: the scenarios against their FP32 references
void add_check(CommandLine::State& s) {
  RunOptions& run_opts = s.check_args.run;
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
void add_validate(CommandLine::State& s) {
  RunOptions& run_opts = s.validate_args.run;
  ValidateOptions& v = s.validate_args.validate;
  s.validate = s.app.add_subcommand(
      "validate",
      "does this stack compute what a known-good one did? the validation suite against its golden "
      "trajectories: bit for bit where the stack fingerprint matches, else statistically (and which)");
  add_scenario_options(s, run_opts, s.validate);
  add_output_options(run_opts, s.validate);
  s.validate->add_option("--references", run_opts.references,
                         "reference root with validate/<class>/ goldens (default: <source>/references)");
  s.validate->add_flag("--record", v.record,
                       "write this stack's goldens (references/validate/<class>/) instead of comparing");
  s.validate->add_option(
      "--plant", v.plants,
      "plant a fault to prove the checks: bitflip:<param|grad>:<glob>:<element>:<bit>@<step>[:transient], "
      "tf32, nondeterministic, reduced-reduction, matmul-bf16 (repeatable)");
  s.validate->add_option("--seal", v.seal,
                         "add the content checksum, config hash and step count to goldens recorded before they "
                         "existed, from each file's own content (trusted goldens only; repeatable); nothing trains");
  s.number(s.validate, "--replays", v.replays,
           "replays of the first differing step (default 3; at least 2: a fault that varies shows between replays)", 2,
           100);
  s.validate->add_flag("--strict", run_opts.strict, "warnings fail the statistical verdict (as for check)");
  s.validate->add_flag("--fleet", v.fleet,
                       "this process is one rank of a torchrun / srun job: every rank runs the suite, the ranks vote "
                       "within groups of one stack fingerprint, outliers are named and replayed; rank 0 writes --out");
  s.number(s.validate, "--repeat", v.repeat,
           "--fleet: run the suite N times, counting per rank how often it disagreed (default once)", 1, 1e6);
  s.number(s.validate, "--duration", v.duration_s,
           "--fleet: repeat until S seconds have passed on rank 0 (at least once; at most --repeat times if given)", 1,
           30 * 86400.0);
  s.validate->add_option("--plant-rank", v.plant_ranks,
                         "--fleet: R[/K]:<plant> plants a --plant on rank R (in repetition K only) (repeatable)");
  s.number(s.validate, "--fleet-timeout", v.fleet_timeout_s,
           "--fleet: seconds a rank waits at an exchange for others that are alive but slower (default 1800)", 1,
           86400);
  s.number(s.validate, "--fleet-lost-after", v.fleet_lost_after_s,
           "--fleet: a rank whose heartbeat has not changed for S seconds is named lost (died or stopped answering) "
           "and the repetitions done are reported (default 60)",
           2, 86400);
}

// compare: two run directories already written
void add_compare(CommandLine::State& s) {
  CompareArgs& a = s.compare_args;
  s.compare = s.app.add_subcommand("compare", "two run directories side by side; exit 1 on a regression");
  s.compare->add_option("RUN_A", a.run_a, "baseline run directory")->required();
  s.compare->add_option("RUN_B", a.run_b, "run directory to judge")->required();
  s.number(s.compare, "--max-slowdown", a.thresholds.max_slowdown, "step time ratio B/A allowed", 0, 1e6)
      ->default_val(1.10);
  s.number(s.compare, "--max-memory-growth", a.thresholds.max_memory_growth, "peak memory ratio B/A allowed", 0, 1e6)
      ->default_val(1.10);
  s.number(s.compare, "--max-loss-change", a.thresholds.max_loss_change, "|final loss B/A - 1| allowed", 0, 1e6)
      ->default_val(0.02);
}

// report: a run directory's report, written again
void add_report(CommandLine::State& s) {
  ReportArgs& a = s.report_args;
  s.report = s.app.add_subcommand(
      "report", "(re)write report.html and summary.md of a run directory from its summary and trajectories");
  s.report->add_option("RUN_DIR", a.run_dir, "run directory written by `ampcheck check`")->required();
  s.report->add_flag("--force", a.force, "replace an existing report.html");
}

// doctor: the numerical stack
void add_doctor(CommandLine::State& s) {
  DoctorArgs& a = s.doctor_args;
  s.doctor =
      s.app.add_subcommand("doctor", "the numerical stack: device, versions, support, flags, matmul rates, smoke test");
  s.doctor->add_option("--device", a.device, "auto | cpu | cuda");
  s.doctor->add_flag("--json", a.json, "machine-readable output");
  s.number(s.doctor, "--allreduce-ranks", a.options.allreduce_ranks,
           "ranks of the all-reduce check (default: every GPU with NCCL, else 2 CPU processes with Gloo; 0: skip)", 0,
           64);
  s.number(s.doctor, "--allreduce-mb", a.options.allreduce_mb,
           "the all-reduce check's buffer, MiB (default 256 GPU, 4 CPU)", 1.0 / 1024, 1 << 20);
}

// judge: recordings of the user's own training loop against a reference
void add_judge(CommandLine::State& s) {
  JudgeArgs& a = s.judge_args;
  RunOptions& run_opts = a.run;
  s.judge = s.app.add_subcommand(
      "judge", "verdicts for runs of your own training loop (docs/TRAJECTORY_FORMAT.md) against a reference");
  s.judge->add_option("RUN", a.runs, "trajectory files (.h5 or .jsonl)")->required();
  s.judge->add_option("--reference", a.reference, "reference file (from `ampcheck reference` or `ampcheck record`)")
      ->required();
  s.judge->add_option("--expect", a.expect, "the expected verdict (default: the run's 'expect' attribute, else tracks)")
      ->check(CLI::IsMember(verdict::kind_words()));
  s.judge->add_option("--strategy", a.strategy,
                      "the strategy family shown for every run (default: the run's 'strategy' attribute)");
  s.judge->add_flag("--strict", run_opts.strict, "warnings fail (as for check)");
  s.number(s.judge, "--first-steps", a.first_steps,
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
}

// reference: a reference from recordings of the user's own FP32 runs
void add_reference(CommandLine::State& s) {
  ReferenceArgs& a = s.reference_args;
  s.ref_cmd = s.app.add_subcommand("reference",
                                   "a reference from your own FP32 run and a few more FP32 runs that give the noise");
  s.ref_cmd->add_option("FP32_RUN", a.run, "the FP32 run (.h5 or .jsonl)")->required();
  s.ref_cmd
      ->add_option("--spread", a.spread,
                   "FP32 runs that differ from FP32_RUN by one perturbation, each [KIND:]FILE with KIND seed "
                   "(another init seed), order (another data order), ulp (weights nudged by an ulp) or skip (the "
                   "first optimizer step not taken); without KIND: the file's 'perturbation' attribute (the "
                   "recorder's perturbation=...). At least one seed or order run")
      ->required();
  s.ref_cmd->add_option("--out", a.out, "the reference file to write")->required();
  s.ref_cmd->add_flag("--force", a.force, "replace an existing reference file");
}

// sweep: the user's training command under each strategy
void add_sweep(CommandLine::State& s) {
  SweepArgs& a = s.sweep_args;
  s.sweep = s.app.add_subcommand(
      "sweep",
      "which precision is safe and fastest for YOUR model: runs your training command once per strategy (plus three "
      "FP32 runs) and judges each; usage: ampcheck sweep [options] -- python train.py ...");
  s.sweep->add_option("COMMAND", a.options.command, "your training command, after --")->required();
  s.sweep->add_option("--out", a.options.out_dir, "the sweep directory (resumable; default sweep)");
  s.number(s.sweep, "--steps", a.options.steps, "every run's step limit (default: the script's own)", 1, kMaxSteps);
  // one argument, split on commas (a list option would end at the `--` before the command and leave the command's
  // own options to this parser)
  s.sweep
      ->add_option("--strategies", a.strategies,
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
  s.sweep->add_option("--device", a.options.device, "auto (CUDA when present), cpu or cuda: which strategies apply")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  s.sweep->add_flag("--localize", a.options.localize,
                    "for every failing strategy, bisect the modules and name those to keep in FP32");
  s.number(s.sweep, "--probe-steps", a.options.probe_steps,
           "a localization probe's steps (default: the run's own; for a long run that diverges, up to the first "
           "divergence + 25%, at least 100)",
           1, kMaxSteps);
  s.number(s.sweep, "--timeout", a.options.timeout_s, "seconds per run before it is stopped (default: none)", 1, 1e7);
  s.number(s.sweep, "--timing-rounds", a.options.timing_rounds,
           "rounds of short timing re-runs interleaved with FP32 where a strategy's speed is within the FP32 runs' "
           "spread (default 3; 0: none, the ranking stays 'not decisive')",
           0, 20);
  s.sweep->add_flag("--force", a.options.force, "train every run again, the cached FP32 runs included");
  s.sweep->add_flag("--strict", a.options.strict, "warnings fail (as for check)");
}

// localize: which modules a failing scenario must keep in FP32
void add_localize(CommandLine::State& s) {
  usecases::LocalizeOptions& o = s.localize_args.options;
  s.localize = s.app.add_subcommand(
      "localize",
      "for a scenario whose strategy fails against its FP32 reference: which modules to keep in FP32 for it to track "
      "(sweep --localize's bisection, each probe the scenario with model.keep_fp32 set)");
  s.localize->add_option("scenarios", o.run.scenarios, "scenario YAML files")->required();
  s.localize->add_option("--device", o.run.device, "auto | cpu | cuda (default: the scenario's)");
  s.localize->add_option("--out", o.run.out_dir, "run directory")->default_val("reports/latest");
  s.localize->add_flag("--force", o.run.force, "overwrite existing result files");
  s.localize->add_option("--references", o.run.references, "reference root (default: <source>/references)");
  s.number(s.localize, "--probe-steps", o.probe_steps,
           "a probe's steps (default: the run's own; for a run over 100 steps that diverges, up to the first "
           "divergence + 25%, at least 100); the learning-rate schedule stays the run's",
           1, kMaxSteps);
  s.localize->add_flag("--strict", o.run.strict, "warnings fail a probe (as for check)");
}

// _rank: one rank of a data-parallel run started by ampcheck itself (harness/distributed/launcher.h); not for users
void add_rank(CommandLine::State& s) {
  RankArgs& a = s.rank_args;
  s.rank_cmd = s.app.add_subcommand("_rank", "")->group("");
  s.rank_cmd->add_option("SCENARIO", a.scenario)->required();
  s.rank_cmd->add_option("--out", a.out)->required();
  s.rank_cmd->add_option("--device", a.device);
  s.number(s.rank_cmd, "--steps", a.steps, "", 0, kMaxSteps);
}

// _allreduce: one rank of doctor's all-reduce check (harness/distributed/allreduce_check.h); not for users
void add_allreduce(CommandLine::State& s) {
  AllreduceArgs& a = s.allreduce_args;
  s.allreduce_cmd = s.app.add_subcommand("_allreduce", "")->group("");
  s.allreduce_cmd->add_option("--backend", a.backend)->required();
  s.number(s.allreduce_cmd, "--bytes", a.bytes, "", 4, static_cast<double>(1ll << 40))->required();
  s.number(s.allreduce_cmd, "--iterations", a.iterations, "", 1, 1e6)->required();
  s.number(s.allreduce_cmd, "--timeout", a.timeout, "", 1, 86400);
}

}  // namespace

CommandLine::CommandLine() : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.app.require_subcommand(0, 1);
  s.list = s.app.add_subcommand("list", "list scenarios (of a suite) and strategies");
  s.list->add_option("--suite", s.list_args.suite, "suite name (scenarios/suites/<name>.yaml)");
  add_run(s);
  add_record(s);
  add_check(s);
  add_validate(s);
  add_compare(s);
  add_report(s);
  add_doctor(s);
  add_judge(s);
  add_reference(s);
  add_sweep(s);
  add_localize(s);
  add_rank(s);
  add_allreduce(s);
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
  if (*s.allreduce_cmd) {
    const AllreduceArgs& a = s.allreduce_args;
    return distributed::allreduce_rank_main(a.backend, a.bytes, a.iterations, a.timeout);
  }
  if (*s.rank_cmd) {
    const RankArgs& a = s.rank_args;
    return distributed::rank_main(a.scenario, a.device, a.steps, a.out);
  }
  try {
    if (*s.list) return cmd_list(s.list_args.suite);
    if (*s.run) return cmd_run(s.run_args.run);
    if (*s.record) return cmd_record(s.record_args.run);
    if (*s.check) return cmd_check(s.check_args.run);
    if (*s.validate) return cmd_validate(s.validate_args.run, s.validate_args.validate);
    if (*s.compare) return cmd_compare(s.compare_args.run_a, s.compare_args.run_b, s.compare_args.thresholds);
    if (*s.report) return cmd_report(s.report_args.run_dir, s.report_args.force);
    if (*s.doctor) return cmd_doctor(s.doctor_args.device, s.doctor_args.json, s.doctor_args.options);
    if (*s.judge) {
      const JudgeArgs& a = s.judge_args;
      return cmd_judge(
          {a.runs, a.reference, a.expect, a.strategy, parse_tolerance_overrides(a.run.tolerance), a.first_steps},
          a.run);
    }
    if (*s.sweep) {
      usecases::SweepOptions options = s.sweep_args.options;
      std::stringstream list(s.sweep_args.strategies);
      for (std::string name; std::getline(list, name, ',');) options.strategies.push_back(name);
      return cmd_sweep(options);
    }
    if (*s.localize) return cmd_localize(s.localize_args.options);
    if (*s.ref_cmd) {
      const ReferenceArgs& a = s.reference_args;
      return cmd_reference({a.run, a.spread, a.out, a.force});
    }
    return cmd_default(RunOptions{});  // no subcommand: check the default suite, every option at its default
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

const JudgeArgs& CommandLine::judge_args() const { return s_->judge_args; }

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
