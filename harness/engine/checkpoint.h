// Checkpoint files: named tensors plus a JSON header, written atomically (temporary file + rename).
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

// Writes `bytes` to path atomically: path.tmp.<pid> then rename(2). Refuses to replace an existing file unless
// overwrite is true (the error names the file and says --force).
void write_file_atomically(const std::string& path, const std::string& bytes, bool overwrite = true);
// mkdir -p with POSIX calls (std::filesystem's remove_all is unsafe next to libtorch; this keeps to POSIX too).
void make_dirs(const std::string& path);

}  // namespace ampcheck::engine
