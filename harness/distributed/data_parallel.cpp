// DataParallel (data_parallel.h).
#include "distributed/data_parallel.h"

#include "distributed/process_group.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

namespace ampcheck::distributed {

DataParallel::DataParallel(c10::intrusive_ptr<c10d::Backend> backend, const engine::DistributedConfig& cfg,
                           int64_t rank, int64_t world_size)
    : backend_(std::move(backend)), cfg_(cfg), rank_(rank), world_(world_size) {}

void DataParallel::reduce(std::vector<at::Tensor>& tensors, c10d::ReduceOp op, const char* what) {
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  const at::Device device = tensors.front().device();
  if (!device.is_cuda()) {  // Gloo: the collective runs while wait() blocks
    const auto t0 = std::chrono::steady_clock::now();
    wait(backend_->allreduce(tensors, o), what);
    collective_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  // NCCL: wait() returns at once, having made the current stream wait for NCCL's; events on the current stream
  // before the call and after wait() span what the step's stream spends on the collective (its wait for NCCL's
  // stream included), read back once they completed (resolve_events)
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream stream = impl.getStream(device);
  c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  c10::Event end(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  start.record(stream);
  wait(backend_->allreduce(tensors, o), what);
  end.record(stream);
  pending_.emplace_back(std::move(start), std::move(end));
}

void DataParallel::resolve_events(bool block) const {
  while (!pending_.empty() && (block || pending_.front().second.query())) {
    auto& [start, end] = pending_.front();
    end.synchronize();  // at once unless block
    collective_ms_ += start.elapsedTime(end);
    pending_.pop_front();
  }
}

double DataParallel::collective_ms() const {
  resolve_events(true);
  return collective_ms_;
}

void DataParallel::all_reduce(const std::vector<at::Tensor>& grads) {
  if (grads.empty()) return;
  at::NoGradGuard no_grad;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(cfg_.reduce_dtype));
  const int64_t bucket_elems = std::max<int64_t>(1, static_cast<int64_t>(cfg_.bucket_mb * 1024 * 1024) / elem);
  size_t i = 0;
  while (i < grads.size()) {  // consecutive grads, up to bucket_mb of the reduce dtype (a larger grad alone)
    size_t j = i;
    int64_t n = 0;
    std::vector<at::Tensor> flats;
    while (j < grads.size() && (j == i || n + grads[j].numel() <= bucket_elems)) {
      flats.push_back(grads[j].reshape({-1}).to(cfg_.reduce_dtype));
      n += grads[j].numel();
      ++j;
    }
    std::vector<at::Tensor> bucket = {at::cat(flats)};
    bucket[0].div_(static_cast<double>(world_));
    reduce(bucket, c10d::ReduceOp::SUM, "gradient all-reduce");
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t m = grads[k].numel();
      grads[k].copy_(bucket[0].narrow(0, off, m).view(grads[k].sizes()));
      off += m;
    }
    i = j;
  }
}

bool DataParallel::owns_parameter(size_t index) const {
  return cfg_.sharding != "zero1" || static_cast<int64_t>(index % static_cast<size_t>(world_)) == rank_;
}

std::function<void(at::Tensor&)> DataParallel::found_inf_reducer() {
  if (cfg_.sharding != "zero1" || !cfg_.found_inf_agreement) return nullptr;  // PITFALL when off: ranks skip alone
  return [this](at::Tensor& found_inf) {
    std::vector<at::Tensor> t = {found_inf};
    reduce(t, c10d::ReduceOp::MAX, "found_inf all-reduce");
  };
}

void DataParallel::gather_parameters(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < params.size(); ++i) by_dtype[params[i].scalar_type()].push_back(i);
  for (auto& [dtype, idx] : by_dtype) {
    std::vector<at::Tensor> flats;
    for (size_t i : idx)
      flats.push_back(owns_parameter(i) ? params[i].reshape({-1})
                                        : at::zeros({params[i].numel()}, params[i].options()));
    std::vector<at::Tensor> buf = {at::cat(flats)};
    reduce(buf, c10d::ReduceOp::SUM, "parameter all-gather");
    int64_t off = 0;
    for (size_t i : idx) {
      const int64_t m = params[i].numel();
      if (!owns_parameter(i)) params[i].copy_(buf[0].narrow(0, off, m).view(params[i].sizes()));
      off += m;
    }
  }
}

at::Tensor DataParallel::after_step(int64_t step, const std::vector<at::Tensor>& params, const at::Tensor& loss,
                                    const at::Tensor& loss_scale, const at::Tensor& skipped) {
  at::NoGradGuard no_grad;
  if (cfg_.sharding == "zero1") gather_parameters(params);
  const auto opts = loss.options().dtype(at::kDouble);
  const bool check = step % cfg_.check_every == 0;  // the same on every rank: the collective keeps its shape
  // the checksum (check steps only) weighs each parameter's float64 sum by its position, so swapped or shifted
  // values show too
  at::Tensor checksum = at::zeros({}, opts);
  if (check) {
    std::vector<at::Tensor> sums;
    for (const auto& p : params) sums.push_back(p.sum(at::kDouble));
    at::Tensor weights = at::arange(1, static_cast<int64_t>(sums.size()) + 1, opts);
    checksum = (at::stack(sums).to(opts.device()) * weights).sum();
  }
  at::Tensor rows = at::zeros({world_, 4}, opts);
  rows[rank_] = at::stack({loss.to(opts), checksum, loss_scale.to(opts).reshape({}), skipped.to(opts).reshape({})});
  std::vector<at::Tensor> t = {rows};
  reduce(t, c10d::ReduceOp::SUM, "consistency all-reduce");
  if (check) {
    ++consistency_.checks;
    if (consistency_.diverged_step < 0) {
      const at::Tensor host = rows.cpu();  // SYNC POINT (every check_every steps)
      auto a = host.accessor<double, 2>();
      std::ostringstream why;
      bool differ_skip = false, differ_scale = false, differ_params = false;
      for (int64_t r = 1; r < world_; ++r) {
        differ_skip |= a[r][3] != a[0][3];
        differ_scale |= a[r][2] != a[0][2];
        differ_params |= !(a[r][1] == a[0][1]) && !(std::isnan(a[r][1]) && std::isnan(a[0][1]));
      }
      auto ranks_where = [&](int col, double v) {
        std::string s;
        int n = 0;
        for (int64_t r = 0; r < world_; ++r)
          if (a[r][col] == v) s += (n++ ? ", " : "") + std::to_string(r);
        return (n > 1 ? "ranks " : "rank ") + s;
      };
      if (differ_skip) {
        why << ranks_where(3, 1.0) << " skipped, " << ranks_where(3, 0.0) << " stepped";
      } else if (differ_scale) {
        why << "loss scale";
        for (int64_t r = 0; r < world_; ++r) why << (r ? "," : "") << " " << a[r][2] << " on rank " << r;
      } else if (differ_params) {
        why << "parameters differ (checksum";
        for (int64_t r = 0; r < world_; ++r) why << (r ? "," : "") << " rank " << r << " " << a[r][1];
        why << ")";
      }
      if (differ_skip || differ_scale || differ_params) {
        consistency_.diverged_step = step;
        consistency_.message = "ranks diverged at step " + std::to_string(step) + ": " + why.str();
      }
    }
  }
  resolve_events(false);                                   // the collectives' events that completed (no host sync)
  return rows.select(1, 0).mean().to(loss.scalar_type());  // the loss averaged over the ranks (device, no sync)
}

void DataParallel::barrier() {
  const auto t0 = std::chrono::steady_clock::now();
  wait(backend_->barrier(), "barrier");
  collective_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ampcheck::distributed
