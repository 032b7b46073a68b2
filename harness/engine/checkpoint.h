// Checkpoint files: named tensors plus a JSON header, written atomically (temporary file + rename: io/files.h).
// Layout: "AMPCKPT1" | uint64 header length | JSON header {meta, tensors: [{name, dtype, shape, offset, nbytes}]}
// | raw little-endian tensor bytes. Readable without ampcheck (numpy.frombuffer at the given offsets).
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::engine {

struct Checkpoint {
  std::map<std::string, at::Tensor> tensors;  // on the CPU
  nlohmann::json meta;
};

void write_checkpoint(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const nlohmann::json& meta);
Checkpoint read_checkpoint(const std::string& path);

}  // namespace ampcheck::engine
