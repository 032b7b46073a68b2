// c10d process groups from LibTorch for data-parallel runs: the rank's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT — as torchrun, srun wrappers or ampcheck's own launcher set them), a TCPStore, and the
// backend: ProcessGroupGloo (CPU; built where gloo's headers are found) or ProcessGroupNCCL (CUDA; built where nccl.h
// and LibTorch's CUDA libraries are found). No collectives of our own.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <string>

namespace ampcheck::distributed {

struct RankEnv {
  int64_t rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool store_server = false;  // this process hosts the TCPStore (rank 0, unless a launcher or agent hosts it)
};
// True when WORLD_SIZE and RANK are set (a torchrun / srun job, or a rank ampcheck started).
bool in_distributed_environment();
// Reads the variables; a missing or malformed one is an error naming it and what was expected.
RankEnv rank_env_from_environment();

bool backend_available(const std::string& backend);  // "gloo" / "nccl": compiled in (and, for nccl, a GPU)
std::string backends_compiled();                     // e.g. "gloo, nccl"

// prefix: the keys of one process group (a joined job running several scenarios builds one group per scenario on
// the same store; each gets its own key space).
c10::intrusive_ptr<c10d::Store> make_store(const RankEnv& env, std::chrono::milliseconds timeout,
                                           const std::string& prefix);
// The backend for `backend` on this rank. Errors name the backend and why it cannot be used here.
c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                               const RankEnv& env, std::chrono::milliseconds timeout);

// Waits for a collective, turning c10d's errors into one that names the rank and the operation.
void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

}  // namespace ampcheck::distributed
