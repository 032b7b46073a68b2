// doctor's all-reduce check: the collective a data-parallel run depends on, run on this machine's ranks through the
// same c10d backend the scenarios use (NCCL over every GPU, Gloo over CPU processes) — is the result right, and how
// fast is it. Each rank is this program's hidden `_allreduce` command, started by spawn_ranks (logs in memory: the
// check writes no file); rank 0 leaves the result in the launcher's store.
//
// Rank k fills a float32 buffer of `bytes` with (k + 1) * (i mod 251 + 1) and all-reduces it (SUM); every element
// must then be exactly W (W + 1) / 2 * (i mod 251 + 1) — integers below 2^24, so any summation order is exact and the
// comparison is bit for bit. Then `iterations` timed all-reduces of the same size (each waited for and the device
// synchronised), median time per rank, the slowest rank's median reported: algorithm bandwidth bytes / t, and bus
// bandwidth algbw * 2 (W - 1) / W (nccl-tests' convention for all-reduce: what each link carries).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace ampcheck::distributed {

struct AllReduceCheckSpec {
  std::string backend = "gloo";  // gloo (CPU processes) | nccl (one GPU per rank)
  int64_t world_size = 2;
  int64_t bytes = 64 << 20;
  int64_t iterations = 20;
  double timeout_s = 120;
};

struct AllReduceCheck {
  AllReduceCheckSpec spec;
  bool ran = false;            // false: it could not run (error says why)
  bool correct = false;        // every rank's result exact
  int64_t wrong_elements = 0;  // summed over the ranks
  double median_ms = 0;        // the slowest rank's median time of one all-reduce
  double algbw_gbs = 0, busbw_gbs = 0;
  std::string device;  // what the ranks reduced on: "cpu" or "cuda:0..W-1"
  std::string error;
  bool required = true;  // false: not asked for and its backend not compiled in (doctor: "not run", not FAILED)
};

// The check as doctor's "allreduce" (a record: io/record_json.h), the spec's fields beside the result's.
template <class V>
void visit_fields(AllReduceCheck& c, V& v) {
  v("backend", c.spec.backend);
  v("world_size", c.spec.world_size);
  v("bytes", c.spec.bytes);
  v("iterations", c.spec.iterations);
  v("device", c.device);
  v("ran", c.ran);
  v("correct", c.correct);
  v("wrong_elements", c.wrong_elements);
  v("median_ms", c.median_ms);
  v("algbw_gbs", c.algbw_gbs);
  v("busbw_gbs", c.busbw_gbs);
  v("error", c.error);
  v.optional("required", c.required, !c.required);
}

// The buffer rank `rank` contributes, and the number of elements of `result` that differ from the exact sum over
// `world_size` ranks (0: correct). Pure functions, shared by the ranks and the tests.
at::Tensor allreduce_check_input(int64_t numel, int64_t rank, const at::TensorOptions& options);
int64_t allreduce_check_wrong_elements(const at::Tensor& result, int64_t world_size);

// Runs the check (spawns the ranks; throws nothing: a failure is in .error).
AllReduceCheck run_allreduce_check(const AllReduceCheckSpec& spec);
nlohmann::json to_json(const AllReduceCheck& c);  // io::record_to_json of visit_fields above
// The check in one line, doctor's "all-reduce check": "OK: gloo, 2 ranks (cpu), 4 MiB fp32 SUM, median 6.6 ms of 5:
// algbw 0.635 GB/s, busbw 0.635 GB/s; result exact", or why it did not run ("not run: ..." where not required).
std::string describe(const AllReduceCheck& c);

// The `_allreduce` command: one rank of the check (from the environment spawn_ranks sets). Returns the exit code.
int allreduce_rank_main(const std::string& backend, int64_t bytes, int64_t iterations, double timeout_s);

}  // namespace ampcheck::distributed
