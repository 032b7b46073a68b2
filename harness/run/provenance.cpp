// Provenance attributes of result and reference files.
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

std::map<std::string, std::string> provenance(const scenario::Scenario& sc, const at::Device& device) {
  const engine::DeviceInfo info = engine::device_info(device);
  const std::string date = utc_now();
  std::map<std::string, std::string> p = {{"ampcheck_version", AMPCHECK_VERSION},
                                          {"libtorch_version", engine::libtorch_version()},
                                          {"cuda_version", engine::cuda_runtime_version()},
                                          {"cudnn_version", engine::cudnn_version()},
                                          {"device_name", info.name},
                                          {"device_class", info.device_class},
                                          {"scenario_name", sc.run.name},
                                          {"scenario_path", sc.path},
                                          {"scenario_text", sc.text},
                                          {"scenario_hash", std::to_string(std::hash<std::string>{}(sc.text))},
                                          {"strategy", sc.run.strategy.name + ": " + sc.run.strategy.describe()},
                                          {"date", date}};
  for (const auto& [k, v] : engine::stack_fingerprint(device)) p["stack_" + k] = v;  // what a validation compares
  return p;
}

}  // namespace ampcheck::run
