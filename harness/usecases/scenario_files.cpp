// Where scenarios and references are, which files a command names, the plan that reads each once, and one scenario
// run as the options say (scenario_files.h).
#include "usecases/scenario_files.h"

#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "engine/device.h"
#include "engine/engine_plan.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <map>
#include <ostream>
#include <stdexcept>

namespace ampcheck::usecases {

std::string scenarios_dir() {
  if (const char* env = std::getenv("AMPCHECK_SCENARIOS")) return env;
  return std::string(AMPCHECK_SOURCE_DIR) + "/scenarios";
}

std::string references_dir() {
  if (const char* env = std::getenv("AMPCHECK_REFERENCES")) return env;
  return std::string(AMPCHECK_SOURCE_DIR) + "/references";
}

std::string reference_root(const RunOptions& opts) {
  return opts.references.empty() ? references_dir() : opts.references;
}

std::vector<std::string> resolve_scenario_files(const RunOptions& opts) {
  std::vector<std::string> files = opts.scenarios;
  if (!opts.suite.empty()) {
    auto suite = scenario::load_suite(scenarios_dir(), opts.suite);
    files.insert(files.end(), suite.begin(), suite.end());
  }
  if (files.empty()) throw std::runtime_error("no scenarios given. HINT: name scenario files or --suite ci");
  return files;
}

namespace {

// --device cuda without a CUDA device ("" if not so).
std::string no_cuda_for(const RunOptions& opts) {
  if (opts.device.rfind("cuda", 0) == 0 && !at::hasCUDA())
    return "--device " + opts.device + " but no CUDA device is available here";
  return "";
}

// Every scenario data-parallel on CUDA with more ranks than this machine has GPUs ("" if one is not). scenario(i) gives
// the i-th of n, loaded as it is asked for: the answer is known at the first that fits.
template <class ScenarioAt>
std::string too_few_gpus(size_t n, ScenarioAt scenario, const RunOptions& opts) {
  if (distributed::in_distributed_environment()) return "";  // a torchrun / srun job brings its own GPUs
  const int64_t gpus = engine::cuda_device_count();
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const scenario::Scenario& sc = scenario(i);
    const std::string dev = opts.device.empty() ? sc.device : opts.device;
    const int64_t world = sc.run.distributed.enabled ? sc.run.distributed.world_size : 1;
    const bool cuda = dev == "cuda" || (dev == "auto" && gpus > 0);
    if (!cuda || world <= 1 || world <= gpus) return "";
    if (first.empty())
      first = sc.run.name + " needs " + std::to_string(world) + " GPUs (one per rank), this machine has " +
              std::to_string(gpus);
  }
  return first + (n > 1 ? " (and so does every other scenario named)" : "");
}

// --engine's options applied to a scenario as parsed.
void apply_engine_option(scenario::Scenario& sc, const RunOptions& opts) {
  if (opts.engine == "fast") {
    engine::request_fast_engine(sc.run);
  } else if (opts.engine != "stock") {
    throw std::invalid_argument("--engine: expected stock or fast, got '" + opts.engine + "'");
  }
}

}  // namespace

std::string why_skipped(const std::vector<std::string>& files, const RunOptions& opts) {
  if (const std::string why = no_cuda_for(opts); !why.empty()) return why;
  scenario::Scenario loaded;
  return too_few_gpus(
      files.size(), [&](size_t i) -> const scenario::Scenario& { return loaded = scenario::load_scenario(files[i]); },
      opts);
}

scenario::Scenario load_for_run(const std::string& file, const RunOptions& opts) {
  scenario::Scenario sc = scenario::load_scenario(file);
  apply_engine_option(sc, opts);
  return sc;
}

ScenarioPlan plan_scenarios(const RunOptions& opts) {
  ScenarioPlan plan;
  const std::vector<std::string> files = resolve_scenario_files(opts);
  plan.skipped = no_cuda_for(opts);
  if (!plan.skipped.empty()) return plan;
  std::vector<PlannedScenario> parsed;
  for (const auto& f : files) parsed.push_back({f, scenario::load_scenario(f), {}});
  plan.skipped = too_few_gpus(
      parsed.size(), [&](size_t i) -> const scenario::Scenario& { return parsed[i].scenario; }, opts);
  if (!plan.skipped.empty()) return plan;
  for (auto& p : parsed) {
    apply_engine_option(p.scenario, opts);
    p.expected = scenario::expectation(p.scenario.expect);
  }
  refuse_duplicate_scenario_names(parsed);  // a bad scenario file is named before the run directory
  plan.scenarios = std::move(parsed);
  return plan;
}

StagedScenarios stage_scenarios(const RunOptions& requested) {
  StagedScenarios staged{plan_scenarios(requested), nullptr, requested};  // every file read once, or why none runs here
  if (!staged.plan.skipped.empty()) return staged;
  check_run_directory_replaceable(requested);              // before any training: nothing run, nothing written
  staged.out = std::make_unique<RunDirectory>(requested);  // written whole: it appears complete or not at all
  staged.opts = staged.out->staged(requested);
  return staged;
}

void log_scenario_start(std::ostream& log, size_t i, size_t n, const scenario::Scenario& sc,
                        const std::string& detail) {
  log << "[" << (i + 1) << "/" << n << "] " << sc.run.name << " (" << sc.run.strategy.name
      << (detail.empty() ? "" : ", " + detail) << ")\n"
      << std::flush;
}

PlannedScenario plan_scenario(const std::string& file, const RunOptions& opts) {
  PlannedScenario p{file, load_for_run(file, opts), {}};
  p.expected = scenario::expectation(p.scenario.expect);
  return p;
}

void refuse_duplicate_scenario_names(const std::vector<PlannedScenario>& scenarios) {
  std::map<std::string, std::string> file_of_name;
  for (const auto& p : scenarios) {
    const std::string& name = p.scenario.run.name;
    const auto [it, fresh] = file_of_name.emplace(name, p.file);
    if (!fresh)
      throw std::runtime_error(it->second + " and " + p.file + " both name their scenario '" + name +
                               "': their results would share " + name +
                               ".h5 in the run directory. HINT: give "
                               "each scenario its own `name:` (or name each file once)");
  }
}

at::Device run_device(const scenario::Scenario& sc, const RunOptions& opts) {
  return engine::resolve_device(opts.device.empty() ? sc.device : opts.device);
}

run::ScenarioResult train_single_or_data_parallel(const scenario::Scenario& sc, const at::Device& device,
                                                  const RunOptions& opts, bool* writes_results,
                                                  engine::Trainer::ProgressFn progress) {
  if (writes_results) *writes_results = true;
  if (sc.run.distributed.enabled)
    return distributed::run_distributed(sc, opts.device, opts.steps, opts.out_dir, writes_results);
  return run::train_scenario(sc, device, opts.steps, std::move(progress));
}

}  // namespace ampcheck::usecases
