// Provenance attributes of result and reference files, and a scenario's result file.
#include "run/provenance.h"

#include "engine/device.h"

#include <ctime>
#include <functional>

namespace ampcheck::run {

std::string utc_now() {
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

trajectory::RunAttributes machine_provenance(const at::Device& device) {
  const engine::DeviceInfo info = engine::device_info(device);
  trajectory::RunAttributes p;
  p.ampcheck_version = AMPCHECK_VERSION;
  p.libtorch_version = engine::libtorch_version();
  p.cuda_version = engine::cuda_runtime_version();
  p.cudnn_version = engine::cudnn_version();
  p.device_name = info.name;
  p.device_class = info.device_class;
  p.date = utc_now();
  return p;
}

trajectory::RunAttributes provenance(const scenario::Scenario& sc, const at::Device& device) {
  trajectory::RunAttributes p = machine_provenance(device);
  p.scenario_name = sc.run.name;
  p.scenario_path = sc.path;
  p.scenario_text = sc.text;
  p.scenario_hash = std::to_string(std::hash<std::string>{}(sc.text));
  p.strategy = sc.run.strategy.name + ": " + sc.run.strategy.describe();
  for (const auto& [k, v] : engine::stack_fingerprint(device)) p.stack[k] = v;  // what a validation compares
  return p;
}

trajectory::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                       const ScenarioResult& r) {
  trajectory::TrajectoryFile tf;
  tf.attributes = provenance(sc, device);
  tf.attributes.status = r.outcome.status;
  tf.attributes.error = r.outcome.error;
  tf.attributes.engine = r.engine;
  if (r.outcome.first_nonfinite_step >= 0) {  // the first step that went non-finite and where (engine::RunOutcome)
    tf.attributes.first_nonfinite_step = r.outcome.first_nonfinite_step;
    tf.attributes.first_nonfinite_module = r.outcome.first_nonfinite_module;
    tf.attributes.first_nonfinite_pass = r.outcome.first_nonfinite_pass;
  }
  tf.trajectory = r.trajectory;
  return tf;
}

}  // namespace ampcheck::run
