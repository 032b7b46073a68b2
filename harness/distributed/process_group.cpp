// c10d process groups (process_group.h).
#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef AMPCHECK_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef AMPCHECK_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <ATen/Context.h>

#include <cstdlib>
#include <stdexcept>

namespace ampcheck::distributed {

namespace {
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}
int64_t env_int(const char* name, int64_t fallback, bool required) {
  const char* v = env(name);
  if (!v) {
    if (required)
      throw std::runtime_error(std::string("environment variable ") + name + " is not set (expected an integer)");
    return fallback;
  }
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < 0)
    throw std::runtime_error(std::string("environment variable ") + name + "='" + v + "': expected an integer >= 0");
  return x;
}
}  // namespace

bool in_distributed_environment() { return env("WORLD_SIZE") && env("RANK"); }

RankEnv rank_env_from_environment() {
  RankEnv e;
  e.world_size = env_int("WORLD_SIZE", 1, true);
  e.rank = env_int("RANK", 0, true);
  e.local_rank = env_int("LOCAL_RANK", e.rank, false);
  if (e.world_size < 1 || e.rank >= e.world_size)
    throw std::runtime_error("RANK=" + std::to_string(e.rank) + " WORLD_SIZE=" + std::to_string(e.world_size) +
                             ": expected 0 <= RANK < WORLD_SIZE");
  if (const char* a = env("MASTER_ADDR")) e.master_addr = a;
  e.master_port = static_cast<int>(env_int("MASTER_PORT", 29500, false));
  if (e.master_port <= 0 || e.master_port > 65535)
    throw std::runtime_error("MASTER_PORT=" + std::to_string(e.master_port) + ": expected a TCP port (1..65535)");
  // ampcheck's launcher, or torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True), hosts the store; else rank 0 does
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  const bool hosted = env("AMPCHECK_STORE_HOSTED") || (agent && std::string(agent) == "True");
  e.store_server = e.rank == 0 && !hosted;
  return e;
}

std::string backends_compiled() {
  std::string s;
#ifdef AMPCHECK_HAVE_GLOO
  s += "gloo";
#endif
#ifdef AMPCHECK_HAVE_NCCL
  s += s.empty() ? "nccl" : ", nccl";
#endif
  return s.empty() ? "none" : s;
}

bool backend_available(const std::string& backend) {
#ifdef AMPCHECK_HAVE_GLOO
  if (backend == "gloo") return true;
#endif
#ifdef AMPCHECK_HAVE_NCCL
  if (backend == "nccl") return at::hasCUDA();
#endif
  return false;
}

c10::intrusive_ptr<c10d::Store> make_store(const RankEnv& e, std::chrono::milliseconds timeout,
                                           const std::string& prefix) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(e.master_port);
  o.isServer = e.store_server;
  o.numWorkers = std::nullopt;
  o.waitWorkers = false;
  o.timeout = timeout;
  // one connection (and, on the hosting rank, one server on MASTER_PORT) per process, shared by every group
  static c10::intrusive_ptr<c10d::TCPStore> tcp;
  if (!tcp) tcp = c10::make_intrusive<c10d::TCPStore>(e.master_addr, o);
  return c10::make_intrusive<c10d::PrefixStore>("ampcheck/" + prefix, tcp);
}

c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                               const RankEnv& e, std::chrono::milliseconds timeout) {
  if (!backend_available(backend))
    throw std::runtime_error(
        "distributed.backend '" + backend + "' is not available here (compiled in: " + backends_compiled() +
        (backend == "nccl" ? "; nccl also needs a CUDA device" : "") +
        "). HINT: gloo needs gloo's headers at build time (Debian: libgloo-dev), nccl needs nccl.h "
        "and LibTorch's CUDA build");
#ifdef AMPCHECK_HAVE_GLOO
  if (backend == "gloo") {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(e.rank), static_cast<int>(e.world_size),
                                                       opts);
  }
#endif
#ifdef AMPCHECK_HAVE_NCCL
  if (backend == "nccl") {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(e.rank), static_cast<int>(e.world_size),
                                                       opts);
  }
#endif
  (void)store, (void)e, (void)timeout;
  throw std::runtime_error("distributed.backend '" + backend + "': unknown");
}

void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& ex) {
    throw std::runtime_error(std::string(what) + " failed: " + ex.what());
  }
}

}  // namespace ampcheck::distributed
