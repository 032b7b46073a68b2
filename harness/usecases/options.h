// What the use cases take: the options of the commands that run scenarios (run, record, check, validate, judge,
// localize) and of sweep, as the command line parsed them. harness/cli parses into these; harness/usecases reads them
// (a use case's own headers include this one, never the other way).
#pragma once

#include "verdict/verdict.h"  // verdict::Tolerance

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::usecases {

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
  // where it applies (engine::request_fast_engine: CUDA graphs, the fused LM head, the fused residual add + LayerNorm,
  // the fused bias gradients / GELU backward, the GEMM epilogues), each applied or refused with its reason.
  std::string engine = "stock";
  std::vector<std::string> tolerance;  // judge: KEY=VALUE overrides of verdict::Tolerance (k, window, ratio_floor, ...)
  bool more_noise = false;             // record: also a second seed and a second data order (6 noise runs)
  bool strict = false;  // check / judge: a warning (a diagnostic beyond its allowance while the outcomes track, a
                        // column never measured, mixed precision not in effect) fails its scenario
};

// `ampcheck localize`'s options: the scenarios, --device, --out / --force and --references as check takes them.
struct LocalizeOptions {
  RunOptions run;
  int64_t probe_steps = 0;  // a probe's steps (0: localize.h probe_length's default)
};

// `ampcheck validate`'s own options.
struct ValidateOptions {
  std::vector<std::string> plants;  // --plant: planted faults (validate/validate.h parse_plant)
  int64_t replays = 3;              // replays of a differing step
  bool record = false;              // write this stack's goldens instead of comparing
  std::vector<std::string> seal;    // --seal: add the seal (validate/golden.h) to these goldens, from their content
  // --fleet: this process is one rank of a torchrun / srun job; the ranks vote (usecases/validate_fleet.cpp)
  bool fleet = false;
  int64_t repeat = 0;                    // --repeat N: the suite N times (0: once, or as often as --duration allows)
  double duration_s = 0;                 // --duration S: repeat until S seconds have passed on rank 0 (at least once)
  std::vector<std::string> plant_ranks;  // --plant-rank R[/K]:<plant>: plant on rank R (in repetition K only)
  double fleet_timeout_s = 1800;         // --fleet-timeout: how long a rank waits for the others at an exchange
  // --fleet-lost-after: a rank whose heartbeat has not changed this long is lost (died or stopped answering)
  double fleet_lost_after_s = 60;
};

// `ampcheck doctor`'s all-reduce check.
struct DoctorOptions {
  int64_t allreduce_ranks = -1;  // the all-reduce check's ranks: -1 every GPU (CUDA) or 2 (CPU), 0 none
  double allreduce_mb = 0;       // its buffer, MiB (0: 256 on a GPU, 4 on the CPU)
};

// `ampcheck judge`'s inputs: external runs (docs/TRAJECTORY_FORMAT.md) and the reference they are judged against.
struct JudgeInputs {
  std::vector<std::string> runs;
  std::string reference;
  std::string expect;            // --expect: every run's expected verdict ("" = each file's own `expect`, else tracks)
  std::string strategy;          // --strategy: the strategy every run claims ("" = each file's own)
  verdict::Tolerance tolerance;  // with --tolerance's overrides applied
  int64_t first_steps = 0;       // > 0: only each run's first steps, judged as a partial run (ampcheck.judge(steps=N))
  // the runs were written by this process's own recorder (the Python package's live guard): read in this process,
  // not in the forked reader that contains a malformed file's crash (a fork copies a large training process's page
  // tables and makes its writes copy-on-write while the reader lives)
  bool runs_written_here = false;
};

// `ampcheck sweep`'s options (usecases/sweep.h). kTimingRounds: the default of --timing-rounds, the rounds of
// interleaved re-runs that rank a strategy's speed (sweep.h "Speed rankings").
constexpr int kTimingRounds = 3;
struct SweepOptions {
  std::vector<std::string> command;     // the user's training command (argv)
  std::string out_dir = "sweep";        // the sweep directory
  int64_t steps = 0;                    // every run's step limit (0: the script's own length)
  bool force = false;                   // redo every run, the FP32 runs included
  bool localize = false;                // bisect the modules of every failing strategy
  int64_t probe_steps = 0;              // a localization probe's length (0: the run's, or to the failure + 25%)
  std::vector<std::string> strategies;  // the candidates (empty: every one the device supports)
  std::string device = "auto";          // which strategies the device supports: auto (CUDA when present), cpu, cuda
  double timeout_s = 0;                 // per run, seconds (0: none)
  int64_t timing_rounds =
      kTimingRounds;  // the budget of interleaved timing re-runs per strategy (kTimingRounds; 0: none)
  bool strict = false;
};

// `ampcheck reference`'s inputs: the user's FP32 run and the runs that measure FP32's own spread.
struct ReferenceInputs {
  std::string fp32_run;
  std::vector<std::string> spread;  // [KIND:]FILE, KIND seed | order | skip | ulp
  std::string out;
  bool force = false;
};

}  // namespace ampcheck::usecases
