// Launching and joining data-parallel runs (launcher.h).
#include "distributed/launcher.h"

#include "distributed/data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/spawn.h"
#include "engine/device.h"
#include "io/files.h"
#include "io/record_json.h"
#include "io/text.h"
#include "trajectory/run_status.h"
#include "trajectory/trajectory_file.h"
#include "run/provenance.h"
#include "scenario/scenario.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <stdexcept>

namespace ampcheck::distributed {

namespace {

// ---------------------------------------------------------------------------------------------------------------------
// What a rank sends rank 0 besides its trajectory: one JSON attribute of its file, `rank_result`, written and read
// through the record codec that writes summary.json (io/record_json.h), so a field added here travels by itself.

struct RankResult {
  // how the rank's run ended: an engine run's Completed | NonFinite | Error, its word in the JSON (the record codec's
  // enum field: trajectory::enum_words(RunStatus))
  trajectory::RunStatus status = trajectory::RunStatus::Completed;
  std::string error;
  int64_t failed_step = -1, rank = 0, world_size = 0;
  std::string model_description, workload, compute_dtype, timing_method;
  double tokens_per_step = NAN, samples_per_step = NAN, flops_per_step = NAN;
  int64_t peak_memory_bytes = 0, peak_reserved_bytes = 0;
  double collective_ms = NAN;  // time this rank waited on collectives (DataParallel::collective_ms)
  int64_t consistency_checks = 0, diverged_step = -1;
  std::string consistency;
  // where this rank first went non-finite (engine::RunOutcome's first_nonfinite_*: -1 / "" where it did not)
  int64_t first_nonfinite_step = -1;
  std::string first_nonfinite_module, first_nonfinite_pass;
};

template <class V>
void visit_fields(RankResult& r, V& v) {
  v.required("status", r.status);
  v("error", r.error);
  v("failed_step", r.failed_step);
  v("rank", r.rank);
  v("world_size", r.world_size);
  v("model_description", r.model_description);
  v("workload", r.workload);
  v("compute_dtype", r.compute_dtype);
  v("timing_method", r.timing_method);
  v("tokens_per_step", r.tokens_per_step);
  v("samples_per_step", r.samples_per_step);
  v("flops_per_step", r.flops_per_step);
  v("peak_memory_bytes", r.peak_memory_bytes);
  v("peak_reserved_bytes", r.peak_reserved_bytes);
  v("collective_ms", r.collective_ms);
  v("consistency_checks", r.consistency_checks);
  v("diverged_step", r.diverged_step);
  v("consistency", r.consistency);
  v("first_nonfinite_step", r.first_nonfinite_step);
  v("first_nonfinite_module", r.first_nonfinite_module);
  v("first_nonfinite_pass", r.first_nonfinite_pass);
}

// A rank's file as rank 0 reads it: the trajectory and the rank's result.
struct RankFile {
  trajectory::TrajectoryFile file;
  RankResult result;
};

RankFile read_rank_file(const std::string& path) {
  RankFile f{trajectory::read_trajectory(path), {}};
  const auto& rank_result = f.file.attributes.rank_result;
  try {
    if (!rank_result) throw std::runtime_error("the attribute is missing");
    io::record_from_json(nlohmann::json::parse(*rank_result), f.result);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": attribute 'rank_result': " + io::printable_text(e.what()) +
                             ". HINT: a rank file is written by this ampcheck's `_rank`; re-run the scenario");
  }
  return f;
}

const char* dtype_label(at::ScalarType t) { return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "fp32"; }

// One rank's run -> its file.
void write_rank_file(const std::string& path, const scenario::Scenario& sc, const run::ScenarioResult& r,
                     const DataParallel* dp, const RankEnv& env, const at::Device& device) {
  RankResult x;
  x.status = r.outcome.status;
  x.error = r.outcome.error;
  x.failed_step = r.outcome.failed_step;
  x.first_nonfinite_step = r.outcome.first_nonfinite_step;
  x.first_nonfinite_module = r.outcome.first_nonfinite_module;
  x.first_nonfinite_pass = r.outcome.first_nonfinite_pass;
  x.rank = env.rank;
  x.world_size = env.world_size;
  x.model_description = r.model_description;
  x.workload = r.workload;
  x.compute_dtype = r.compute_dtype;
  x.timing_method = r.timing.method;
  x.tokens_per_step = r.tokens_per_step;
  x.samples_per_step = r.samples_per_step;
  x.flops_per_step = r.flops_per_step;
  x.peak_memory_bytes = r.peak_memory_bytes;
  x.peak_reserved_bytes = r.peak_reserved_bytes;
  if (dp) {
    x.collective_ms = dp->collective_ms();
    x.consistency_checks = dp->consistency().checks;
    x.diverged_step = dp->consistency().diverged_step;
    x.consistency = dp->consistency().message;
  }
  trajectory::TrajectoryFile tf;
  tf.attributes = run::provenance(sc, device);
  tf.attributes.status = r.outcome.status;  // every trajectory file's own attributes (x.status's word)
  tf.attributes.error = x.error;
  nlohmann::json j = io::record_to_json(x);
  io::make_json_strings_printable(j);  // dump() throws on a string that is not UTF-8 (an error text may hold one)
  tf.attributes.rank_result = j.dump();
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
  const at::Device device = engine::resolve_device(dev);  // once: the run and its file's provenance
  run::ScenarioResult r = run::train_scenario(sc, device, steps, nullptr, dp.get());
  write_rank_file(out_file, sc, r, dp.get(), env, device);
  if (keep) *keep = dp.get();
  return r;
}

// The merged result from the ranks' files.
run::ScenarioResult merge(const scenario::Scenario& sc, const std::string& dir, int64_t world,
                          const std::string& launch) {
  std::vector<RankFile> files;
  for (int64_t k = 0; k < world; ++k) files.push_back(read_rank_file(dir + "/rank" + std::to_string(k) + ".h5"));
  const RankResult& x0 = files[0].result;
  run::ScenarioResult r;
  r.name = sc.run.name;
  r.device_class = files[0].file.attributes.device_class.value_or("");
  r.trajectory = files[0].file.trajectory;
  r.model_description = x0.model_description;
  r.workload = x0.workload + ", " + std::to_string(world) + " ranks";
  r.compute_dtype = x0.compute_dtype;
  r.tokens_per_step = x0.tokens_per_step;
  r.samples_per_step = x0.samples_per_step;
  r.flops_per_step = x0.flops_per_step;
  r.peak_memory_bytes = x0.peak_memory_bytes;
  r.peak_reserved_bytes = x0.peak_reserved_bytes;
  r.outcome.status = x0.status;
  r.outcome.error = x0.error;
  r.outcome.failed_step = x0.failed_step;
  r.outcome.steps_run = r.trajectory.size();
  for (int64_t k = 1; k < world; ++k)  // a rank that raised alone: its error, named
    if (files[k].result.status == trajectory::RunStatus::Error && r.outcome.status != trajectory::RunStatus::Error) {
      r.outcome.status = trajectory::RunStatus::Error;
      r.outcome.error = "rank " + std::to_string(k) + ": " + files[k].result.error;
    }
  // where the run first went non-finite: the earliest rank's (the ranks share their reduced gradients, not their
  // batches, so one rank may go non-finite in its forward a step before the others)
  for (const auto& f : files) {
    const RankResult& x = f.result;
    auto& o = r.outcome;
    if (x.first_nonfinite_step >= 0 &&
        (o.first_nonfinite_step < 0 || x.first_nonfinite_step < o.first_nonfinite_step)) {
      o.first_nonfinite_step = x.first_nonfinite_step;
      o.first_nonfinite_module = x.first_nonfinite_module;
      o.first_nonfinite_pass = x.first_nonfinite_pass;
    }
  }
  const auto& rows = r.trajectory.rows;
  if (!rows.empty()) {
    r.first_loss = rows.front()[trajectory::kLoss];
    r.final_loss = rows.back()[trajectory::kLoss];
    r.min_loss = r.first_loss;
    for (const auto& row : rows) r.min_loss = std::min(r.min_loss, row[trajectory::kLoss]);
    r.timing = run::step_timing(r.trajectory, x0.timing_method);
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
    ds.rank_median_step_ms.push_back(run::step_timing(f.file.trajectory, x0.timing_method).median_ms);
    double total = 0;
    for (const auto& row : f.file.trajectory.rows)
      if (std::isfinite(row[trajectory::kStepTimeMs])) total += row[trajectory::kStepTimeMs];
    ds.rank_collective_share.push_back(total > 0 ? f.result.collective_ms / total : NAN);
  }
  ds.consistency_checks = x0.consistency_checks;
  ds.diverged_step = x0.diverged_step;
  ds.consistency = x0.consistency;
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
