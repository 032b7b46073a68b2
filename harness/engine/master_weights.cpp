// MasterWeights (master_weights.h).
#include "engine/master_weights.h"

#include <ATen/core/grad_mode.h>

namespace ampcheck::engine {

MasterWeights::MasterWeights(const std::vector<models::NamedParameter>& params) {
  for (const auto& p : params) {
    at::Tensor m = p.tensor.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    masters_.push_back(m.requires_grad_(true));
  }
}

std::vector<at::Tensor> MasterWeights::detached() const {
  std::vector<at::Tensor> out;
  for (const auto& m : masters_) out.push_back(m.detach());
  return out;
}

void MasterWeights::take_grads(const std::vector<models::NamedParameter>& params) {
  if (masters_.empty()) return;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].tensor.grad();
    masters_[i].mutable_grad() = g.defined() ? g.to(at::kFloat) : at::Tensor();
  }
}

void MasterWeights::copy_back(std::vector<models::NamedParameter>& params) const {
  if (masters_.empty()) return;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].tensor.copy_(masters_[i]);
}

}  // namespace ampcheck::engine
