// Starting the ranks of a job on this machine and watching them — what torchrun's agent does for one node, for
// ampcheck's own hidden rank commands (`_rank`: one rank of a data-parallel scenario; `_allreduce`: one rank of
// doctor's all-reduce check). The launcher hosts the TCPStore (port 0: the kernel picks a free one), so a rank that
// dies cannot take it with it; each rank is this same program, forked and exec'd with RANK / LOCAL_RANK /
// WORLD_SIZE / MASTER_ADDR / MASTER_PORT / AMPCHECK_STORE_HOSTED set (and OMP_NUM_THREADS = cores / ranks unless set),
// its stdout and stderr in its log, and dies with the launcher (PR_SET_PDEATHSIG).
//
// A rank that exits non-zero or by a signal ends the job at once: the others get SIGTERM, then SIGKILL after 2 s, and
// the error names the rank, how it ended and its log's tail. A rank still running `grace_s` after another finished
// is stopped the same way and named (hung?). No rank outlives spawn_ranks.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::distributed {

struct SpawnSpec {
  // the arguments after the program ("_rank", path, ...); "{rank}" in one stands for the rank's number
  std::vector<std::string> args;
  int64_t world_size = 1;
  double store_timeout_s = 300;  // the store's timeout (the ranks' process groups set their own)
  double grace_s = 15;           // how long a rank may run on after another finished
  // where rank k's output goes: "<log_dir>/rank<k>.log", with "<log_dir>/pids" (a "<rank> <pid>" line per rank)
  // beside them; empty: in memory only (an anonymous file), for a job that must write nothing on disk — its tail
  // still reaches the error
  std::string log_dir;
  bool announce = false;  // print "  rank k: pid P, log L" as each starts
};

// Starts the ranks, returns when every one exited with code 0, and hands back the store (the ranks may have left
// their results in it). Throws naming the rank that failed or hung; no rank is left running.
c10::intrusive_ptr<c10d::TCPStore> spawn_ranks(const SpawnSpec& spec);

}  // namespace ampcheck::distributed
