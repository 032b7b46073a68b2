// Checkpoint reader/writer.
#include "engine/checkpoint.h"

#include "io/files.h"

#include <ATen/core/grad_mode.h>

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
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    default:
      throw std::invalid_argument(std::string("checkpoint: unsupported dtype ") + c10::toString(t));
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
    header["tensors"].push_back({{"name", name},
                                 {"dtype", dtype_tag(c.scalar_type())},
                                 {"shape", c.sizes().vec()},
                                 {"offset", payload.size()},
                                 {"nbytes", nbytes}});
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
    if (base + offset + nbytes > bytes.size())
      throw std::runtime_error(path + ": tensor '" + name + "' runs past the file end");
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

// ---------------------------------------------------------------------------------------------------------------
// training checkpoints

namespace ampcheck::engine {

void save_training_state(const std::string& path, const TrainingState& st, nlohmann::json meta) {
  NamedTensors tensors;
  for (const auto& p : st.params) tensors.emplace_back("model/" + p.name, p.tensor.detach());
  for (size_t i = 0; i < st.masters.size(); ++i)
    tensors.emplace_back("master/" + std::to_string(i), st.masters[i].detach());
  for (size_t o = 0; o < st.optimizers.size(); ++o)
    for (auto& [name, t] : st.optimizers[o]->state())
      tensors.emplace_back((o == 0 ? "optim/" : "optim" + std::to_string(o) + "/") + name, t);
  if (st.precision)
    for (auto& nt : st.precision->state()) tensors.push_back(std::move(nt));  // delayed scaling's amax histories
  meta["next_step"] = st.next_step;
  nlohmann::json sd = nlohmann::json::object();
  if (st.scaler)
    for (const auto& [k, v] : st.scaler->state_dict()) sd[k] = v;
  meta["scaler"] = sd;
  write_checkpoint(path, tensors, meta);
}

void load_training_state(const std::string& path, TrainingState& st, bool restore_scaler) {
  Checkpoint ck = read_checkpoint(path);
  at::NoGradGuard no_grad;
  auto take = [&](const std::string& name, at::Tensor& into) {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) throw std::runtime_error(path + ": checkpoint has no tensor '" + name + "'");
    if (it->second.sizes() != into.sizes() || it->second.scalar_type() != into.scalar_type())
      throw std::runtime_error(path + ": tensor '" + name + "' is " + c10::toString(it->second.scalar_type()) + " " +
                               c10::str(it->second.sizes()) + ", the run expects " + c10::toString(into.scalar_type()) +
                               " " + c10::str(into.sizes()) + ". HINT: resume with the scenario that saved it");
    into.copy_(it->second);
  };
  for (auto& p : st.params) take("model/" + p.name, p.tensor);
  for (size_t i = 0; i < st.masters.size(); ++i) take("master/" + std::to_string(i), st.masters[i]);
  for (size_t o = 0; o < st.optimizers.size(); ++o) {
    const std::string prefix = o == 0 ? "optim/" : "optim" + std::to_string(o) + "/";
    NamedTensors optim_state;
    for (const auto& [name, t] : ck.tensors)
      if (name.rfind(prefix, 0) == 0) optim_state.emplace_back(name.substr(prefix.size()), t);
    st.optimizers[o]->load_state(optim_state);
  }
  if (st.scaler && restore_scaler) {
    amp::GradScalerStateDict sd;
    for (auto& [k, v] : ck.meta.at("scaler").items()) sd[k] = v.get<double>();
    st.scaler->load_state_dict(sd);
  }
  if (st.precision) st.precision->load_state(ck.tensors, path);
  st.next_step = ck.meta.at("next_step").get<int64_t>();
}

}  // namespace ampcheck::engine
