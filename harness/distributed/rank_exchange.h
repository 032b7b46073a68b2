// Byte messages between the ranks of a torchrun / srun job, through the job's c10d process group: Gloo with CPU
// tensors on a CPU rank, NCCL with tensors on the rank's GPU — the collectives data parallel uses, no transport of
// our own. `validate --fleet` sends its records (JSON text) through it: an all-gather (every rank gets every rank's
// message, so every rank computes the same vote and knows without another message who replays what) and a broadcast
// (the majority's trajectory, from its representative, to the outliers).
//
// An all-gather of messages of different lengths is two collectives: the lengths (one int64 per rank), then the
// messages padded to the longest (uint8). So each rank sends max_length bytes and receives world_size x max_length:
// the traffic() counters say how many, and how long the exchanges took.
//
// Slurm: srun sets SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_JOB_NODELIST, not torchrun's variables;
// `apply_slurm_environment` maps them (the first host of the node list is MASTER_ADDR) for the commands that ask.
#pragma once

#include "distributed/process_group.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::distributed {

// "node[01-04,07],gpu7" -> "node01"; "a,b" -> "a"; "host" -> "host". Throws naming the list when it has no host.
std::string first_slurm_host(const std::string& nodelist);
// The torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) an srun task's Slurm variables map
// to, from `env` (name -> value: the process environment, or a test's). Empty when SLURM_PROCID / SLURM_NTASKS are
// not both set, or RANK and WORLD_SIZE already are (torchrun inside an allocation wins). MASTER_PORT, unless set:
// 20000 + SLURM_JOB_ID mod 20000 (every task of the job computes the same; two jobs on one node rarely collide).
std::vector<std::pair<std::string, std::string>> slurm_rank_variables(const std::map<std::string, std::string>& env);
// Sets slurm_rank_variables(the process environment) in the environment; returns whether it did.
bool apply_slurm_environment();

class RankExchange {
 public:
  // The process group of `env` on `device`: gloo for a CPU device, nccl for a CUDA one. `prefix` names its keys in
  // the store. Throws naming the backend when it cannot be used here.
  RankExchange(const RankEnv& env, const at::Device& device, std::chrono::milliseconds timeout,
               const std::string& prefix);
  ~RankExchange();
  RankExchange(const RankExchange&) = delete;
  RankExchange& operator=(const RankExchange&) = delete;

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  const std::string& backend_name() const { return backend_name_; }

  // Every rank's message, in rank order (this rank's included). Collective: every rank calls it, in the same order.
  std::vector<std::string> all_gather(const std::string& mine);
  // `root`'s message on every rank (what the others pass is ignored). Collective.
  std::string broadcast(const std::string& message, int64_t root);
  // Waits for every rank (an all-gather of one integer). Collective.
  void barrier();

  struct Traffic {
    int64_t exchanges = 0;        // all_gather / broadcast calls
    int64_t bytes_sent = 0;       // by this rank, padding included
    int64_t bytes_received = 0;   // by this rank, padding included
    int64_t largest_message = 0;  // the longest message (unpadded) this rank has seen
    double seconds = 0;           // wall clock inside all_gather / broadcast (waiting for slower ranks included)
  };
  const Traffic& traffic() const { return traffic_; }

 private:
  at::Tensor bytes_tensor(const std::string& s, int64_t length) const;
  RankEnv env_;
  at::Device device_;
  std::string backend_name_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  Traffic traffic_;
};

}  // namespace ampcheck::distributed
