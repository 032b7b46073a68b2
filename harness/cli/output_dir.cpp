// The run directory's rules (output_dir.h).
#include "cli/output_dir.h"

#include "run/provenance.h"

#include <stdexcept>

namespace ampcheck::cli {

bool may_overwrite(const RunOptions& opts) { return opts.force || opts.out_dir == RunOptions{}.out_dir; }

std::string refusing_to_overwrite(const std::string& path) {
  return path + ": exists; refusing to overwrite. HINT: pass --force to replace it";
}

void refuse_existing_outputs(const RunOptions& opts, const std::vector<std::string>& names) {
  if (may_overwrite(opts)) return;
  for (const auto& name : names)
    if (file_exists(opts.out_dir + "/" + name))
      throw std::runtime_error(refusing_to_overwrite(opts.out_dir + "/" + name) + ", or another --out");
}

void refuse_existing_run_outputs(const std::vector<std::string>& files, const RunOptions& opts) {
  if (may_overwrite(opts)) return;
  std::vector<std::string> names = {"summary.json", "junit.xml", "summary.md", "report.html"};
  for (const auto& f : files) names.push_back(load_for_run(f, opts).run.name + ".h5");
  refuse_existing_outputs(opts, names);
}

reference::TrajectoryFile result_file(const scenario::Scenario& sc, const at::Device& device,
                                      const engine::ScenarioResult& r) {
  reference::TrajectoryFile tf;
  tf.attributes = engine::provenance(sc, device);
  tf.attributes["status"] = engine::status_name(r.outcome.status);
  tf.attributes["error"] = r.outcome.error;
  tf.attributes["engine"] = r.engine;
  tf.trajectory = r.trajectory;
  return tf;
}

void write_result(const RunOptions& opts, const std::string& file_name, const reference::TrajectoryFile& tf) {
  reference::write_trajectory(opts.out_dir + "/" + file_name, tf, may_overwrite(opts));
}

}  // namespace ampcheck::cli
