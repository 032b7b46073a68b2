// record: the FP32 references of the scenarios named, for this device class — each the FP32 run and its noise runs
// (another seed, ±1-ulp weights, another data order; reference/reference_store.h), written once and kept unless
// --force.
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "engine/device.h"
#include "io/files.h"
#include "reference/reference_store.h"
#include "trajectory/run_status.h"
#include "trajectory/trajectory_file.h"
#include "run/provenance.h"

#include <cstdlib>
#include <ostream>
#include <set>

namespace ampcheck::usecases {

namespace {

// Trains one FP32 reference run; throws if it does not complete (a reference must be clean).
trajectory::Trajectory train_reference(const engine::RunConfig& cfg, const at::Device& device) {
  engine::Trainer trainer(cfg, device);
  const auto out = trainer.run();
  if (out.status != engine::RunOutcome::Status::Completed)
    throw std::runtime_error("reference run '" + cfg.name + "' ended " + engine::status_name(out.status) + " at step " +
                             std::to_string(out.failed_step) + (out.error.empty() ? "" : ": " + out.error));
  return trainer.trajectory();
}

struct ToRecord {
  scenario::Scenario sc;
  at::Device device;
  engine::RunConfig run;  // the scenario's, at --steps
  std::string device_class, path;
};

ToRecord planned(const std::string& file, const RunOptions& opts) {
  ToRecord t{scenario::load_scenario(file), at::kCPU, {}, "", ""};
  t.device = engine::resolve_device(opts.device.empty() ? t.sc.device : opts.device);
  t.device_class = engine::device_info(t.device).device_class;
  t.run = t.sc.run;
  if (opts.steps > 0) t.run.loop.steps = opts.steps;
  t.path = reference::reference_path(reference_root(opts), t.device_class, reference::reference_key(t.run).key);
  return t;
}

// The reference of one scenario: the FP32 run, its noise runs and their spread, its provenance.
trajectory::TrajectoryFile record_one(const ToRecord& t, bool more_noise) {
  const engine::RunConfig ref_cfg = reference::reference_run_config(t.run);
  const auto key = reference::reference_key(t.run);
  trajectory::TrajectoryFile tf;
  tf.trajectory = train_reference(ref_cfg, t.device);
  std::string labels;
  for (const auto& p : reference::noise_perturbations(more_noise)) {
    tf.noise_runs.push_back({p.label, train_reference(reference::perturbed(ref_cfg, p), t.device)});
    labels += (labels.empty() ? "" : ",") + p.label;
  }
  tf.series["loss_spread"] = reference::loss_spread(tf.trajectory, tf.noise_runs);
  tf.attributes = run::provenance(t.sc, t.device);
  tf.attributes.kind = "fp32-reference";
  tf.attributes.reference_key = key.key;
  tf.attributes.reference_canonical = key.canonical;
  tf.attributes.noise_runs = labels;
  tf.attributes.status = trajectory::RunStatus::Completed;
  if (const char* commit = std::getenv("AMPCHECK_GIT_COMMIT")) tf.attributes.git_commit = commit;
  return tf;
}

}  // namespace

RecordResult record_references(const RunOptions& opts, std::ostream& log) {
  const auto files = resolve_scenario_files(opts);
  // before any training: under --force, every reference file to be re-recorded must be one ampcheck wrote
  if (opts.force)
    for (const auto& f : files) refuse_unless_replaceable_file(planned(f, opts).path, true, kReferenceFile);
  std::set<std::string> done;
  RecordResult result;
  for (const auto& f : files) {
    const ToRecord t = planned(f, opts);
    if (!done.insert(t.path).second) continue;  // another scenario of the list shares this reference
    if (io::file_exists(t.path) && !opts.force) {
      log << "kept      " << t.path << " (exists; --force re-records it)\n";
      ++result.kept;
      continue;
    }
    log << "recording " << t.path << " for " << t.sc.run.name << " (" << t.run.loop.steps << " steps + "
        << reference::noise_perturbations(opts.more_noise).size() << " noise runs)\n"
        << std::flush;
    const auto tf = record_one(t, opts.more_noise);
    io::make_dirs(reference_root(opts) + "/" + t.device_class);
    trajectory::write_trajectory(t.path, tf, opts.force);
    ++result.recorded;
  }
  return result;
}

}  // namespace ampcheck::usecases
