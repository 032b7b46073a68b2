// doctor's all-reduce check (allreduce_check.h).
#include "distributed/allreduce_check.h"

#include "distributed/process_group.h"
#include "distributed/spawn.h"
#include "engine/device.h"
#include "io/record_json.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace ampcheck::distributed {

namespace {
constexpr int64_t kPeriod = 251;  // the pattern's period: values up to W (W + 1) / 2 * 251, exact in fp32 for W < 400
const char* kPrefix = "allreduce-check";

at::Tensor pattern(int64_t numel, const at::TensorOptions& options) {
  return at::remainder(at::arange(numel, options.dtype(at::kLong)), kPeriod).add_(1).to(at::kFloat);
}
}  // namespace

at::Tensor allreduce_check_input(int64_t numel, int64_t rank, const at::TensorOptions& options) {
  return pattern(numel, options).mul_(static_cast<double>(rank + 1));
}

int64_t allreduce_check_wrong_elements(const at::Tensor& result, int64_t world_size) {
  const at::Tensor expected =
      pattern(result.numel(), result.options()).mul_(static_cast<double>(world_size * (world_size + 1) / 2));
  return result.reshape({-1}).ne(expected).sum().item<int64_t>();  // SYNC POINT: the check's verdict
}

nlohmann::json to_json(const AllReduceCheck& c) { return io::record_to_json(c); }

std::string describe(const AllReduceCheck& c) {
  std::ostringstream m;
  m << std::setprecision(3);
  const std::string what = c.spec.backend + ", " + std::to_string(c.spec.world_size) + " ranks";
  if (!c.ran) {
    m << (c.required ? "FAILED" : "not run") << ": " << what << ": " << c.error;
  } else {
    m << (c.correct ? "OK" : "FAILED") << ": " << what << " (" << c.device << "), "
      << static_cast<double>(c.spec.bytes) / (1 << 20) << " MiB fp32 SUM, median " << c.median_ms << " ms of "
      << c.spec.iterations << ": algbw " << c.algbw_gbs << " GB/s, busbw " << c.busbw_gbs << " GB/s; result "
      << (c.correct ? std::string("exact") : std::to_string(c.wrong_elements) + " elements wrong");
  }
  return m.str();
}

AllReduceCheck run_allreduce_check(const AllReduceCheckSpec& spec) {
  AllReduceCheck c;
  c.spec = spec;
  try {
    if (spec.world_size < 1)
      throw std::runtime_error("world size " + std::to_string(spec.world_size) + ": expected >= 1");
    if (spec.bytes < 4 || spec.iterations < 1) throw std::runtime_error("expected bytes >= 4 and iterations >= 1");
    if (!backend_available(spec.backend))
      throw std::runtime_error("backend '" + spec.backend +
                               "' is not available here (compiled in: " + backends_compiled() + ")");
    SpawnSpec s;
    s.args = {"_allreduce",
              "--backend",
              spec.backend,
              "--bytes",
              std::to_string(spec.bytes),
              "--iterations",
              std::to_string(spec.iterations),
              "--timeout",
              std::to_string(spec.timeout_s)};
    s.world_size = spec.world_size;
    s.store_timeout_s = spec.timeout_s;
    s.grace_s = std::min(15.0, spec.timeout_s);
    auto tcp = spawn_ranks(s);
    auto store = c10::make_intrusive<c10d::PrefixStore>(std::string("ampcheck/") + kPrefix, tcp);
    if (!store->check({"result"})) throw std::runtime_error("rank 0 ended without leaving its result");
    const auto bytes = store->get("result");
    const auto j = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
    c.device = j.at("device").get<std::string>();
    c.wrong_elements = j.at("wrong_elements").get<int64_t>();
    c.median_ms = j.at("median_ms").get<double>();
    c.correct = c.wrong_elements == 0;
    c.ran = true;
    const double sec = c.median_ms / 1e3;
    c.algbw_gbs = sec > 0 ? spec.bytes / sec / 1e9 : 0;
    c.busbw_gbs = c.algbw_gbs * 2.0 * static_cast<double>(spec.world_size - 1) / static_cast<double>(spec.world_size);
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

int allreduce_rank_main(const std::string& backend_name, int64_t bytes, int64_t iterations, double timeout_s) {
  try {
    const RankEnv env = rank_env_from_environment();
    at::Device device(at::kCPU);
    if (backend_name == "nccl") {
      const int64_t gpus = engine::cuda_device_count();
      if (env.local_rank >= gpus)
        throw std::runtime_error("local rank " + std::to_string(env.local_rank) + " needs GPU " +
                                 std::to_string(env.local_rank) + ", this machine has " + std::to_string(gpus));
      device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
    }
    c10::DeviceGuard guard(device);
    const auto opts = at::TensorOptions().device(device);
    const int64_t numel = std::max<int64_t>(1, bytes / 4);
    // the buffers before the process group: a rank that cannot allocate them fails on its own, before any peer is
    // connected to it (failing mid-rendezvous, it made a peer fail first with "connection closed by peer", the
    // message doctor then showed instead of this rank's own)
    at::Tensor x = allreduce_check_input(numel, env.rank, opts);
    at::Tensor buf = at::zeros({numel}, opts.dtype(at::kFloat));
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    auto store = make_store(env, timeout, kPrefix);
    auto backend = make_backend(backend_name, store, env, timeout);
    auto all_reduce = [&](at::Tensor& t, c10d::ReduceOp op, const char* what) {
      std::vector<at::Tensor> v = {t};
      c10d::AllreduceOptions o;
      o.reduceOp = op;
      wait(backend->allreduce(v, o), what);
    };
    // correctness
    all_reduce(x, c10d::ReduceOp::SUM, "all-reduce check");
    engine::synchronize(device);
    at::Tensor wrong =
        at::full({1}, static_cast<double>(allreduce_check_wrong_elements(x, env.world_size)), opts.dtype(at::kDouble));
    // timing: 3 warm-ups, then `iterations` waited-for and synchronised all-reduces of the same size
    std::vector<double> ms;
    for (int64_t i = 0; i < iterations + 3; ++i) {
      engine::synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      all_reduce(buf, c10d::ReduceOp::SUM, "timed all-reduce");
      engine::synchronize(device);  // SYNC POINT: timing
      if (i >= 3)
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    at::Tensor median = at::full({1}, ms[ms.size() / 2], opts.dtype(at::kDouble));
    all_reduce(wrong, c10d::ReduceOp::SUM, "result all-reduce");
    all_reduce(median, c10d::ReduceOp::MAX, "timing all-reduce");
    engine::synchronize(device);
    if (env.rank == 0) {
      const nlohmann::json j = {
          {"device", device.is_cuda() ? "cuda:0.." + std::to_string(env.world_size - 1) : std::string("cpu")},
          {"wrong_elements", static_cast<int64_t>(wrong.item<double>())},
          {"median_ms", median.item<double>()}};
      const std::string s = j.dump();
      store->set("result", std::vector<uint8_t>(s.begin(), s.end()));
    }
    wait(backend->barrier(), "barrier");
    backend->shutdown();
    return 0;
  } catch (const c10::Error& e) {  // ATen's message without its C++ backtrace: the log's tail reaches doctor
    std::cerr << "ampcheck _allreduce: " << e.what_without_backtrace() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "ampcheck _allreduce: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace ampcheck::distributed
