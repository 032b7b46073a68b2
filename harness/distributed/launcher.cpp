// Launching and joining data-parallel runs (launcher.h).
#include "distributed/launcher.h"

#include "distributed/data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/spawn.h"
#include "engine/device.h"
#include "io/files.h"
#include "trajectory/trajectory_file.h"
#include "run/provenance.h"
#include "scenario/scenario.h"
#include "verdict/pass_rule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace ampcheck::distributed {

namespace {

std::string attr(const trajectory::TrajectoryFile& f, const std::string& k, const std::string& d = "") {
  auto it = f.attributes.find(k);
  return it == f.attributes.end() ? d : it->second;
}
double attr_num(const trajectory::TrajectoryFile& f, const std::string& k) {
  const std::string v = attr(f, k);
  return v.empty() ? NAN : std::stod(v);
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

const char* dtype_label(at::ScalarType t) { return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "fp32"; }

engine::RunOutcome::Status status_from(const std::string& s) {
  if (s == "error") return engine::RunOutcome::Status::Error;
  if (s == "nonfinite") return engine::RunOutcome::Status::NonFinite;
  return engine::RunOutcome::Status::Completed;
}

// One rank's run -> its file.
void write_rank_file(const std::string& path, const scenario::Scenario& sc, const run::ScenarioResult& r,
                     const DataParallel* dp, const RankEnv& env, const std::string& device_spec) {
  trajectory::TrajectoryFile tf;
  tf.attributes = run::provenance(sc, engine::resolve_device(device_spec));
  tf.attributes["status"] = engine::status_name(r.outcome.status);
  tf.attributes["error"] = r.outcome.error;
  tf.attributes["failed_step"] = std::to_string(r.outcome.failed_step);
  tf.attributes["rank"] = std::to_string(env.rank);
  tf.attributes["world_size"] = std::to_string(env.world_size);
  tf.attributes["model_description"] = r.model_description;
  tf.attributes["workload"] = r.workload;
  tf.attributes["compute_dtype"] = r.compute_dtype;
  tf.attributes["timing_method"] = r.timing.method;
  tf.attributes["tokens_per_step"] = num(r.tokens_per_step);
  tf.attributes["samples_per_step"] = num(r.samples_per_step);
  tf.attributes["flops_per_step"] = num(r.flops_per_step);
  tf.attributes["peak_memory_bytes"] = std::to_string(r.peak_memory_bytes);
  tf.attributes["peak_reserved_bytes"] = std::to_string(r.peak_reserved_bytes);
  tf.attributes["expectation_met"] = r.expectation_met ? "1" : "0";
  tf.attributes["expectation_note"] = r.expectation_note;
  if (dp) {
    tf.attributes["collective_ms"] = num(dp->collective_ms());
    tf.attributes["consistency_checks"] = std::to_string(dp->consistency().checks);
    tf.attributes["diverged_step"] = std::to_string(dp->consistency().diverged_step);
    tf.attributes["consistency"] = dp->consistency().message;
  }
  tf.trajectory = r.trajectory;
  trajectory::write_trajectory(path, tf, /*overwrite=*/true);
}

// Runs this process as one rank: process group from the environment, training, its file.
run::ScenarioResult run_rank(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps,
                             const std::string& out_file, const RankEnv& env, DataParallel** keep = nullptr) {
  const auto& d = sc.run.distributed;
  if (env.world_size != d.world_size)
    throw std::runtime_error(sc.path + ": distributed.world_size is " + std::to_string(d.world_size) +
                             ", the environment has WORLD_SIZE=" + std::to_string(env.world_size));
  std::string dev = device_spec.empty() ? sc.device : device_spec;
  if (dev == "auto") dev = at::hasCUDA() ? "cuda" : "cpu";
  if (dev == "cuda") dev = "cuda:" + std::to_string(env.local_rank);  // one GPU per local rank
  if (d.backend == "nccl" && dev.rfind("cuda", 0) != 0)
    throw std::runtime_error(sc.path + ": distributed.backend nccl needs a CUDA device (--device cuda), not " + dev);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(d.timeout_s * 1000));
  auto store = make_store(env, timeout, sc.run.name);
  auto backend = make_backend(d.backend, store, env, timeout);
  static std::unique_ptr<DataParallel> dp;  // outlives the result for the joined path's barrier
  dp = std::make_unique<DataParallel>(backend, d, env.rank, env.world_size);
  run::ScenarioResult r = run::run_scenario(sc, dev, steps, nullptr, dp.get());
  write_rank_file(out_file, sc, r, dp.get(), env, dev);
  if (keep) *keep = dp.get();
  return r;
}

// The merged result from the ranks' files.
run::ScenarioResult merge(const scenario::Scenario& sc, const std::string& dir, int64_t world,
                          const std::string& launch) {
  std::vector<trajectory::TrajectoryFile> files;
  for (int64_t k = 0; k < world; ++k)
    files.push_back(trajectory::read_trajectory(dir + "/rank" + std::to_string(k) + ".h5"));
  const auto& f0 = files[0];
  run::ScenarioResult r;
  r.name = sc.run.name;
  r.device_class = attr(f0, "device_class");
  r.trajectory = f0.trajectory;
  r.model_description = attr(f0, "model_description");
  r.workload = attr(f0, "workload") + ", " + std::to_string(world) + " ranks";
  r.compute_dtype = attr(f0, "compute_dtype");
  r.tokens_per_step = attr_num(f0, "tokens_per_step");
  r.samples_per_step = attr_num(f0, "samples_per_step");
  r.flops_per_step = attr_num(f0, "flops_per_step");
  r.peak_memory_bytes = static_cast<int64_t>(attr_num(f0, "peak_memory_bytes"));
  r.peak_reserved_bytes = static_cast<int64_t>(attr_num(f0, "peak_reserved_bytes"));
  r.expectation_met = attr(f0, "expectation_met") == "1";
  r.expectation_note = attr(f0, "expectation_note");
  r.outcome.status = status_from(attr(f0, "status"));
  r.outcome.error = attr(f0, "error");
  r.outcome.failed_step = static_cast<int64_t>(attr_num(f0, "failed_step"));
  r.outcome.steps_run = r.trajectory.size();
  for (int64_t k = 1; k < world; ++k)  // a rank that raised alone: its error, named
    if (attr(files[k], "status") == "error" && (r.outcome.status != engine::RunOutcome::Status::Error)) {
      r.outcome.status = engine::RunOutcome::Status::Error;
      r.outcome.error = "rank " + std::to_string(k) + ": " + attr(files[k], "error");
      r.expectation_met =  // the one pass rule, on that rank's own error text
          verdict::decide(scenario::expectation(sc.expect), verdict::observe_status("error", attr(files[k], "error")),
                          false)
              .pass;
    }
  const auto& rows = r.trajectory.rows;
  if (!rows.empty()) {
    r.first_loss = rows.front()[trajectory::kLoss];
    r.final_loss = rows.back()[trajectory::kLoss];
    r.min_loss = r.first_loss;
    for (const auto& row : rows) r.min_loss = std::min(r.min_loss, row[trajectory::kLoss]);
    r.timing = run::step_timing(r.trajectory, attr(f0, "timing_method"));
  }
  auto& ds = r.distributed;
  const auto& d = sc.run.distributed;
  ds.world_size = world;
  ds.backend = d.backend;
  ds.sharding = d.sharding;
  ds.reduce_dtype = dtype_label(d.reduce_dtype);
  ds.launch = launch;
  ds.rank_files = dir;
  for (const auto& f : files) {
    ds.rank_median_step_ms.push_back(run::step_timing(f.trajectory, attr(f0, "timing_method")).median_ms);
    double total = 0;
    for (const auto& row : f.trajectory.rows)
      if (std::isfinite(row[trajectory::kStepTimeMs])) total += row[trajectory::kStepTimeMs];
    ds.rank_collective_share.push_back(total > 0 ? attr_num(f, "collective_ms") / total : NAN);
  }
  ds.consistency_checks = static_cast<int64_t>(attr_num(f0, "consistency_checks"));
  ds.diverged_step = static_cast<int64_t>(attr_num(f0, "diverged_step"));
  ds.consistency = attr(f0, "consistency");
  return r;
}

// Starts the ranks (`_rank` of this scenario, logs beside the rank files), returns when all ended; throws naming the
// rank that failed or hung. No rank outlives this function.
void launch_and_wait(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps,
                     const std::string& dir) {
  SpawnSpec spec;
  spec.args = {"_rank", sc.path, "--out", dir + "/rank{rank}.h5"};
  if (!device_spec.empty()) spec.args.insert(spec.args.end(), {"--device", device_spec});
  if (steps > 0) spec.args.insert(spec.args.end(), {"--steps", std::to_string(steps)});
  spec.world_size = sc.run.distributed.world_size;
  spec.store_timeout_s = sc.run.distributed.timeout_s;
  spec.grace_s = std::min(15.0, sc.run.distributed.timeout_s);
  spec.log_dir = dir;
  spec.announce = true;
  spawn_ranks(spec);
}
}  // namespace

run::ScenarioResult run_distributed(const scenario::Scenario& sc, const std::string& device_spec, int64_t steps,
                                    const std::string& out_dir, bool* writes_results) {
  const std::string dir = out_dir + "/" + sc.run.name + ".ranks";
  io::make_dirs(dir);
  if (writes_results) *writes_results = true;
  if (in_distributed_environment()) {  // started by torchrun / srun: this process is one rank
    const RankEnv env = rank_env_from_environment();
    if (writes_results) *writes_results = env.rank == 0;  // set first: a rank that fails writes nothing either
    DataParallel* dp = nullptr;
    run_rank(sc, device_spec, steps, dir + "/rank" + std::to_string(env.rank) + ".h5", env, &dp);
    dp->barrier();  // every rank's file is written (a shared directory is assumed, as for the run directory)
    dp->shutdown();
    if (env.rank != 0) return {};
    return merge(sc, dir, env.world_size, "environment");
  }
  if (!backend_available(sc.run.distributed.backend))
    throw std::runtime_error(sc.path + ": distributed.backend '" + sc.run.distributed.backend +
                             "' is not available here (compiled in: " + backends_compiled() + ")");
  // one GPU per rank (rank k on cuda:k, as torchrun's LOCAL_RANK convention): enough GPUs, and no fixed index
  const std::string dev = device_spec.empty() ? sc.device : device_spec;
  const int64_t world = sc.run.distributed.world_size, gpus = engine::cuda_device_count();
  if (dev.rfind("cuda:", 0) == 0 && world > 1)
    throw std::runtime_error(sc.path + ": device '" + dev + "' for " + std::to_string(world) +
                             " ranks: each rank takes the GPU of its local rank (cuda:0 .. cuda:" +
                             std::to_string(world - 1) + "); use --device cuda");
  if ((dev == "cuda" || (dev == "auto" && gpus > 0)) && world > gpus)
    throw std::runtime_error(sc.path + ": distributed.world_size " + std::to_string(world) + " on " + dev + " needs " +
                             std::to_string(world) + " GPUs (one per rank); this machine has " + std::to_string(gpus));
  launch_and_wait(sc, device_spec, steps, dir);
  return merge(sc, dir, sc.run.distributed.world_size, "ampcheck");
}

int rank_main(const std::string& scenario_path, const std::string& device_spec, int64_t steps,
              const std::string& out_file) {
  try {
    const scenario::Scenario sc = scenario::load_scenario(scenario_path);
    const RankEnv env = rank_env_from_environment();
    DataParallel* dp = nullptr;
    const auto r = run_rank(sc, device_spec, steps, out_file, env, &dp);
    dp->shutdown();
    std::cout << "rank " << env.rank << ": " << engine::status_name(r.outcome.status) << ", " << r.trajectory.size()
              << " steps\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ampcheck _rank: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace ampcheck::distributed
