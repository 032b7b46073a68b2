// Mlp — the smallest real model: token embedding -> [Linear -> GELU] x depth -> Linear to vocab logits, applied per
// position (a learned bigram model). Fast enough for many-step CPU scenarios and exact gradient tests.
#pragma once

#include "models/model.h"

namespace ampcheck::models {

ModelConfig resolve_mlp_preset(ModelConfig cfg);
std::vector<std::string> mlp_preset_names();

class Mlp final : public Model {
 public:
  explicit Mlp(const ModelConfig& cfg);
  at::Tensor loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts = {}) override;
  // The parameter names of a resolved config, in the order the model registers them, without building it
  static std::vector<std::string> parameter_names(const ModelConfig& resolved);
  std::string kind() const override { return "mlp"; }
  std::string describe() const override;
  double training_flops_per_token(int64_t seq_len) const override;

 private:
  ModelConfig cfg_;
};

}  // namespace ampcheck::models
