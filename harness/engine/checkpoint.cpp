// Checkpoint reader/writer.
#include "engine/checkpoint.h"

#include "io/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace ampcheck::engine {

namespace {
constexpr char kMagic[8] = {'A', 'M', 'P', 'C', 'K', 'P', 'T', '1'};

std::string dtype_tag(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    default: throw std::invalid_argument(std::string("checkpoint: unsupported dtype ") + c10::toString(t));
  }
}
at::ScalarType dtype_from_tag(const std::string& s, const std::string& path) {
  if (s == "float32") return at::kFloat;
  if (s == "float16") return at::kHalf;
  if (s == "bfloat16") return at::kBFloat16;
  if (s == "float64") return at::kDouble;
  if (s == "int64") return at::kLong;
  if (s == "int32") return at::kInt;
  throw std::runtime_error(path + ": unknown dtype '" + s + "' in checkpoint header");
}
}  // namespace

void write_checkpoint(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const nlohmann::json& meta) {
  nlohmann::json header;
  header["meta"] = meta;
  header["format"] = "ampcheck-checkpoint";
  header["version"] = 1;
  std::string payload;
  std::vector<at::Tensor> cpu;
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const size_t nbytes = c.numel() * c.element_size();
    header["tensors"].push_back({{"name", name}, {"dtype", dtype_tag(c.scalar_type())}, {"shape", c.sizes().vec()},
                                 {"offset", payload.size()}, {"nbytes", nbytes}});
    payload.append(static_cast<const char*>(c.data_ptr()), nbytes);
  }
  const std::string h = header.dump();
  const uint64_t hlen = h.size();
  std::string bytes(kMagic, sizeof(kMagic));
  bytes.append(reinterpret_cast<const char*>(&hlen), sizeof(hlen));
  bytes += h;
  bytes += payload;
  io::write_file_atomically(path, bytes, /*overwrite=*/true);
}

Checkpoint read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open checkpoint");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw std::runtime_error(path + ": not an ampcheck checkpoint (bad magic)");
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  if (16 + hlen > bytes.size()) throw std::runtime_error(path + ": truncated checkpoint header");
  nlohmann::json header = nlohmann::json::parse(bytes.substr(16, hlen));
  const size_t base = 16 + hlen;
  Checkpoint ck;
  ck.meta = header.at("meta");
  for (const auto& t : header.at("tensors")) {
    const auto offset = t.at("offset").get<size_t>(), nbytes = t.at("nbytes").get<size_t>();
    const std::string name = t.at("name");
    if (base + offset + nbytes > bytes.size()) throw std::runtime_error(path + ": tensor '" + name + "' runs past the file end");
    at::Tensor x = at::empty(t.at("shape").get<std::vector<int64_t>>(),
                             at::TensorOptions().dtype(dtype_from_tag(t.at("dtype"), path)));
    if (static_cast<size_t>(x.numel() * x.element_size()) != nbytes)
      throw std::runtime_error(path + ": tensor '" + name + "' byte count does not match its shape");
    std::memcpy(x.data_ptr(), bytes.data() + base + offset, nbytes);
    ck.tensors.emplace(name, x);
  }
  return ck;
}

}  // namespace ampcheck::engine
