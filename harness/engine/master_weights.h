// MasterWeights — fp32 master copies of a reduced-precision model's parameters (strategy.master_weights, the
// "fp16 params + fp32 masters" recipe): the optimizer steps the masters; each step the model's fp16/bf16 grads are
// widened into the masters' grads before unscale/clip/step, and the stepped masters are copied back into the model.
// Empty (every call a no-op) for strategies without masters.
#pragma once

#include "models/model.h"

#include <ATen/ATen.h>

#include <vector>

namespace ampcheck::engine {

class MasterWeights {
 public:
  MasterWeights() = default;  // none
  // fp32 copies of params (requires_grad: the optimizer steps them)
  explicit MasterWeights(const std::vector<models::NamedParameter>& params);

  bool empty() const { return masters_.empty(); }
  size_t size() const { return masters_.size(); }
  at::Tensor& operator[](size_t i) { return masters_[i]; }
  const at::Tensor& operator[](size_t i) const { return masters_[i]; }
  std::vector<at::Tensor> detached() const;  // the masters as the optimizer steps them (for norms and checkpoints)

  void take_grads(const std::vector<models::NamedParameter>& params);  // model grads -> fp32 master grads
  void copy_back(std::vector<models::NamedParameter>& params) const;   // masters -> model params

 private:
  std::vector<at::Tensor> masters_;
};

}  // namespace ampcheck::engine
