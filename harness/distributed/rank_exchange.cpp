// Byte messages between ranks over the job's process group, and the Slurm variables mapped (rank_exchange.h).
#include "distributed/rank_exchange.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace ampcheck::distributed {

// ---------------------------------------------------------------------------------------------------------------------
// Slurm

std::string first_slurm_host(const std::string& nodelist) {
  // the first entry: up to the first comma outside brackets
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const size_t open = entry.find('[');
  std::string host = entry;
  if (open != std::string::npos) {  // prefix[01-04,07]suffix -> prefix01suffix
    const size_t close = entry.find(']', open);
    if (close == std::string::npos)
      throw std::runtime_error("SLURM_JOB_NODELIST='" + nodelist + "': a '[' without its ']'");
    const std::string range = entry.substr(open + 1, close - open - 1);
    const std::string first = range.substr(0, range.find_first_of(",-"));
    host = entry.substr(0, open) + first + entry.substr(close + 1);
  }
  if (host.empty())
    throw std::runtime_error("SLURM_JOB_NODELIST='" + nodelist + "': expected a host list such as node[01-04]");
  return host;
}

std::vector<std::pair<std::string, std::string>> slurm_rank_variables(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) -> std::string {
    const auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  if (!get("RANK").empty() && !get("WORLD_SIZE").empty()) return {};  // torchrun's (or the user's) win
  if (get("SLURM_PROCID").empty() || get("SLURM_NTASKS").empty()) return {};
  std::vector<std::pair<std::string, std::string>> out = {
      {"RANK", get("SLURM_PROCID")}, {"WORLD_SIZE", get("SLURM_NTASKS")}, {"LOCAL_RANK", get("SLURM_LOCALID")}};
  if (out.back().second.empty()) out.pop_back();
  if (get("MASTER_ADDR").empty()) {
    const std::string nodes = get("SLURM_JOB_NODELIST").empty() ? get("SLURM_NODELIST") : get("SLURM_JOB_NODELIST");
    if (nodes.empty())
      throw std::runtime_error(
          "srun task without SLURM_JOB_NODELIST: cannot tell which host holds rank 0's store. HINT: set "
          "MASTER_ADDR to the first node's host name");
    out.emplace_back("MASTER_ADDR", first_slurm_host(nodes));
  }
  if (get("MASTER_PORT").empty()) {
    const std::string job = get("SLURM_JOB_ID");
    char* end = nullptr;
    const long long id = job.empty() ? 0 : std::strtoll(job.c_str(), &end, 10);
    out.emplace_back("MASTER_PORT", std::to_string(20000 + (id > 0 ? id % 20000 : 0)));
  }
  return out;
}

bool apply_slurm_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  const auto vars = slurm_rank_variables(env);
  for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  return !vars.empty();
}

// ---------------------------------------------------------------------------------------------------------------------
// RankExchange

RankExchange::RankExchange(const RankEnv& env, const at::Device& device, std::chrono::milliseconds timeout,
                           const std::string& prefix)
    : env_(env), device_(device), backend_name_(device.is_cuda() ? "nccl" : "gloo") {
  backend_ = make_backend(backend_name_, make_store(env, timeout, prefix), env, timeout);
}

RankExchange::~RankExchange() {
  try {
    backend_->shutdown();  // what destroy_process_group() does (NCCL: communicators released)
  } catch (...) {
  }
}

at::Tensor RankExchange::bytes_tensor(const std::string& s, int64_t length) const {
  at::Tensor t = at::zeros({std::max<int64_t>(length, 1)}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr<uint8_t>(), s.data(), s.size());
  return device_.is_cuda() ? t.to(device_) : t;
}

std::vector<std::string> RankExchange::all_gather(const std::string& mine) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto world = static_cast<size_t>(env_.world_size);
  const auto on = at::TensorOptions().dtype(at::kLong).device(device_);
  // 1. the lengths
  std::vector<at::Tensor> in = {at::full({1}, static_cast<int64_t>(mine.size()), on)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (size_t k = 0; k < world; ++k) out[0].push_back(at::empty({1}, on));
  wait(backend_->allgather(out, in), "all-gather of the message lengths");
  std::vector<int64_t> lengths;
  for (const auto& t : out[0]) lengths.push_back(t.cpu().item<int64_t>());  // SYNC POINT (GPU): sizes for the host
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  // 2. the messages, padded to the longest
  std::vector<at::Tensor> in_bytes = {bytes_tensor(mine, longest)};
  std::vector<std::vector<at::Tensor>> out_bytes(1);
  for (size_t k = 0; k < world; ++k) out_bytes[0].push_back(at::empty_like(in_bytes[0]));
  wait(backend_->allgather(out_bytes, in_bytes), "all-gather of the messages");
  std::vector<std::string> messages;
  for (size_t k = 0; k < world; ++k) {
    const at::Tensor host = out_bytes[0][k].cpu();  // SYNC POINT (GPU): the bytes for the host
    messages.emplace_back(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(lengths[k]));
  }
  const int64_t padded = std::max<int64_t>(longest, 1);
  traffic_.exchanges += 1;
  traffic_.bytes_sent += 8 + padded;
  traffic_.bytes_received += static_cast<int64_t>(world) * (8 + padded);
  traffic_.largest_message = std::max(traffic_.largest_message, longest);
  traffic_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return messages;
}

std::string RankExchange::broadcast(const std::string& message, int64_t root) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto on = at::TensorOptions().dtype(at::kLong).device(device_);
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  std::vector<at::Tensor> length = {at::full({1}, static_cast<int64_t>(message.size()), on)};
  wait(backend_->broadcast(length, opts), "broadcast of a message length");
  const int64_t n = length[0].cpu().item<int64_t>();  // SYNC POINT (GPU): the size for the host
  std::vector<at::Tensor> bytes = {bytes_tensor(env_.rank == root ? message : std::string(), n)};
  wait(backend_->broadcast(bytes, opts), "broadcast of a message");
  const at::Tensor host = bytes[0].cpu();  // SYNC POINT (GPU): the bytes for the host
  traffic_.exchanges += 1;
  (env_.rank == root ? traffic_.bytes_sent : traffic_.bytes_received) += 8 + std::max<int64_t>(n, 1);
  traffic_.largest_message = std::max(traffic_.largest_message, n);
  traffic_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::string(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

void RankExchange::barrier() {
  const auto on = at::TensorOptions().dtype(at::kLong).device(device_);
  std::vector<at::Tensor> in = {at::zeros({1}, on)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t k = 0; k < env_.world_size; ++k) out[0].push_back(at::empty({1}, on));
  wait(backend_->allgather(out, in), "barrier");
  (void)out[0][0].cpu();  // SYNC POINT (GPU): the barrier is passed when the host has the result
}

}  // namespace ampcheck::distributed
