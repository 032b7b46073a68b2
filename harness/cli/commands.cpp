// Subcommand implementations: list, run, doctor and the default job.
#include "report/format.h"
#include "cli/commands.h"
#include "cli/output_dir.h"
#include "distributed/launcher.h"
#include "io/files.h"

#include "engine/device.h"
#include "engine/engine_plan.h"
#include "engine/precision.h"
#include "run/progress.h"
#include "run/provenance.h"
#include "run/scenario_run.h"
#include "trajectory/trajectory_file.h"
#include "doctor/doctor.h"
#include "distributed/allreduce_check.h"
#include "distributed/process_group.h"
#include "scenario/scenario.h"

#include <ATen/Context.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/stat.h>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace ampcheck::cli {

namespace fs = std::filesystem;

std::string scenarios_dir() {
  if (const char* env = std::getenv("AMPCHECK_SCENARIOS")) return env;
  return std::string(AMPCHECK_SOURCE_DIR) + "/scenarios";
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

std::string too_few_gpus(const std::vector<std::string>& files, const RunOptions& opts) {
  if (distributed::in_distributed_environment()) return "";  // a torchrun / srun job brings its own GPUs
  const int64_t gpus = engine::cuda_device_count();
  std::string first;
  for (const auto& f : files) {
    const auto sc = scenario::load_scenario(f);
    const std::string dev = opts.device.empty() ? sc.device : opts.device;
    const int64_t world = sc.run.distributed.enabled ? sc.run.distributed.world_size : 1;
    const bool cuda = dev == "cuda" || (dev == "auto" && gpus > 0);
    if (!cuda || world <= 1 || world <= gpus) return "";
    if (first.empty())
      first = sc.run.name + " needs " + std::to_string(world) + " GPUs (one per rank), this machine has " +
              std::to_string(gpus);
  }
  return first + (files.size() > 1 ? " (and so does every other scenario named)" : "");
}

std::string why_skipped(const std::vector<std::string>& files, const RunOptions& opts) {
  if (opts.device.rfind("cuda", 0) == 0 && !at::hasCUDA())
    return "--device " + opts.device + " but no CUDA device is available here";
  return too_few_gpus(files, opts);
}

void make_dirs(const std::string& path) { io::make_dirs(path); }

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

namespace {
std::string fmt(double v, int prec = 4) { return report::format_number(v, prec); }
}  // namespace

int cmd_list(const std::string& suite) {
  if (!suite.empty()) {
    for (const auto& f : scenario::load_suite(scenarios_dir(), suite)) {
      const auto sc = scenario::load_scenario(f);
      std::cout << std::left << std::setw(32) << sc.run.name << " " << sc.why << "\n";
    }
    return 0;
  }
  std::cout << "strategies:\n";
  for (const auto& n : engine::strategy_preset_names())
    std::cout << "  " << std::left << std::setw(18) << n << engine::strategy_preset(n).describe() << "\n";
  std::cout << "suites: ";
  for (const auto& e : fs::directory_iterator(scenarios_dir() + "/suites"))
    std::cout << e.path().stem().string() << " ";
  std::cout << "\n";
  return 0;
}

scenario::Scenario load_for_run(const std::string& file, const RunOptions& opts) {
  scenario::Scenario sc = scenario::load_scenario(file);
  if (opts.engine == "fast") {
    engine::request_fast_engine(sc.run);
  } else if (opts.engine != "stock") {
    throw std::invalid_argument("--engine: expected stock or fast, got '" + opts.engine + "'");
  }
  return sc;
}

at::Device run_device(const scenario::Scenario& sc, const RunOptions& opts) {
  return engine::resolve_device(opts.device.empty() ? sc.device : opts.device);
}

run::ScenarioResult run_any_scenario(const scenario::Scenario& sc, const RunOptions& opts, bool* writes_results,
                                     engine::Trainer::ProgressFn progress) {
  if (writes_results) *writes_results = true;
  if (sc.run.distributed.enabled)
    return distributed::run_distributed(sc, opts.device, opts.steps, opts.out_dir, writes_results);
  return run::run_scenario(sc, opts.device, opts.steps, std::move(progress));
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

int cmd_run(const RunOptions& requested) {
  const auto files = resolve_scenario_files(requested);
  if (const auto why = why_skipped(files, requested); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return 77;  // CTest's skip code for the gpu label
  }
  refuse_existing_run_outputs(files, requested);  // before any training: nothing run, nothing written
  RunDirectory out(requested);                    // written whole: the run directory appears complete or not at all
  const RunOptions opts = out.staged(requested);
  int failures = 0;
  bool follower = false;
  std::vector<run::ScenarioResult> results;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto sc = load_for_run(files[i], opts);
    std::cout << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ")\n"
              << std::flush;
    bool writes = true;
    auto r =
        run_any_scenario(sc, opts, &writes, run::terminal_progress(opts.steps > 0 ? opts.steps : sc.run.loop.steps));
    if (!writes) {  // a joined rank other than 0: rank 0 writes the run directory
      follower = true;
      continue;
    }
    if (r.distributed.world_size > 0)
      std::cout << "  " << r.distributed.world_size << " ranks (" << r.distributed.backend << "): "
                << (r.distributed.consistency.empty() ? "ranks agreed at every check" : r.distributed.consistency)
                << "\n";
    if (!r.trajectory.rows.empty() || r.outcome.status == engine::RunOutcome::Status::Error)
      write_result(opts, sc.run.name + ".h5", result_file(sc, run_device(sc, opts), r));
    failures += !r.expectation_met;
    results.push_back(std::move(r));
  }
  if (follower && results.empty()) return 0;
  out.publish();
  std::cout << "\n"
            << std::left << std::setw(30) << "scenario" << std::setw(11) << "device" << std::setw(11) << "status"
            << std::setw(8) << "steps" << std::setw(10) << "loss0" << std::setw(10) << "loss_end" << std::setw(9)
            << "skipped" << std::setw(10) << "ms/step"
            << "result\n";
  for (const auto& r : results) {
    std::cout << std::left << std::setw(30) << r.name << std::setw(11) << r.device_class << std::setw(11)
              << engine::status_name(r.outcome.status) << std::setw(8) << r.trajectory.size() << std::setw(10)
              << fmt(r.first_loss) << std::setw(10) << fmt(r.final_loss) << std::setw(9) << r.trajectory.skipped_steps()
              << std::setw(10) << fmt(r.timing.median_ms, 3) << (r.expectation_met ? "PASS" : "FAIL") << "  "
              << r.expectation_note << "\n";
  }
  std::cout << (results.size() - failures) << " passed, " << failures << " failed\n";
  return failures == 0 ? 0 : 1;
}

int cmd_compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t) {
  refuse_incomplete_run_directory(run_a);
  refuse_incomplete_run_directory(run_b);
  const auto a = report::read_summary_json(run_a + "/summary.json");
  const auto b = report::read_summary_json(run_b + "/summary.json");
  const auto c = report::compare_runs(a, b, t);
  std::cout << report::format_comparison(a, b, c);
  return c.regressed() ? 1 : 0;
}

int cmd_doctor(const std::string& device, bool json, const DoctorOptions& o) {
  auto report = doctor::doctor_report(device);
  bool ok = report["smoke_test"]["ok"].get<bool>();
  // the all-reduce check (harness/distributed/allreduce_check.h): NCCL over every GPU on a CUDA device, Gloo over 2 CPU
  // processes on the CPU, where that backend is compiled in; --allreduce-ranks N sets the rank count (0: skip)
  const bool cuda = engine::resolve_device(device).is_cuda();
  distributed::AllReduceCheckSpec spec;
  spec.backend = cuda ? "nccl" : "gloo";
  spec.world_size = o.allreduce_ranks >= 0 ? o.allreduce_ranks : cuda ? engine::cuda_device_count() : 2;
  spec.bytes = static_cast<int64_t>((o.allreduce_mb > 0 ? o.allreduce_mb : cuda ? 256.0 : 4.0) * (1 << 20));
  spec.iterations = cuda ? 20 : 5;
  if (spec.world_size > 0 && (o.allreduce_ranks >= 0 || distributed::backend_available(spec.backend))) {
    const auto c = distributed::run_allreduce_check(spec);
    report["allreduce"] = distributed::to_json(c);
    ok = ok && c.ran && c.correct;
  } else if (spec.world_size > 0) {
    report["allreduce"] = distributed::to_json(distributed::AllReduceCheck{
        spec, false, false, 0, 0, 0, 0, "", "backend " + spec.backend + " not compiled in"});
    report["allreduce"]["required"] = false;
  }
  std::cout << (json ? report.dump(2) + "\n" : doctor::format_doctor(report));
  return ok ? 0 : 1;
}

int cmd_default(RunOptions opts) {
  const at::Device dev = engine::resolve_device("auto");
  opts.suite = dev.is_cuda() ? "gpu" : "ci";
  opts.device = dev.is_cuda() ? "cuda" : "cpu";
  std::cout << "ampcheck: suite '" << opts.suite << "' on " << engine::device_info(dev).name << "\n";
  return cmd_check(opts);
}

}  // namespace ampcheck::cli
