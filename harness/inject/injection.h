// Injections — planted numerical events at chosen steps, applied at defined points of the training step:
//   forward   activation scaling, at one of two sites of a block (`at:`):
//               residual  (default) the residual stream after the block is multiplied. Under autocast that stream
//                         is fp32 and the next LayerNorm normalises it away: fp16 autocast does NOT overflow here
//                         (an fp32-range event; under .half() params it does overflow)
//               mlp_input the LayerNorm output feeding the block's MLP is multiplied (gpt only): under fp16
//                         autocast the MLP's first linear runs in fp16, so values past 65504 are inf and the
//                         loss and grads are non-finite — a real fp16 activation overflow that GradScaler skips
//               mlp_input_spike  the c_fc matmul's input is multiplied and its output divided back (gpt only):
//                         exact in FP32 and bf16 for a power of two, so it changes nothing but the magnitude an
//                         FP8 cast must fit — an activation spike that a stale FP8 scale saturates on
//   loss      underflow: the loss is multiplied by a tiny factor before backward (grads fall into / below fp16's
//             subnormals) and, with `compensate` (default), the grads are multiplied back by 1/factor right after
//             backward — so only the backward pass's own number format decides what survives, and an FP32 run
//             is (almost) unchanged; nan_loss: the loss becomes NaN
//   grads     overflow: inf, -inf, nan or a huge finite value written into chosen parameters' grads, after backward
//             (and after the data-parallel all-reduce point), before unscale
//   init      scale_weights: one module's weights (every parameter of it and its children but the biases) multiplied
//             by a factor once, at initialisation, before the strategy casts the model: a planted module fault whose
//             activations outgrow fp16's range while FP32 and bf16 (8 exponent bits) hold them; it is part of the
//             model, so the FP32 reference keeps it (kept_in_reference)
// Every application is recorded as an event in the trajectory. The Injector is the engine's FaultHooks
// (engine/fault_hooks.h): a run carries it in RunConfig::faults (set_injections), and the trainer calls it at the
// points above without knowing what is planted.
#pragma once

#include "engine/fault_hooks.h"
#include "engine/run_config.h"
#include "models/model.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace ampcheck::inject {

// BitFlip: one bit of one element of a parameter or a gradient flipped in place (a silent data corruption of the kind
// a faulty GPU or memory produces), after backward and before the step.
enum class InjectionKind { GradValue, ActivationScale, LossScale, NanLoss, BitFlip, ScaleWeights };

struct InjectionConfig {
  InjectionKind kind = InjectionKind::GradValue;
  std::vector<int64_t> steps;  // optimizer steps at which it fires
  int64_t from_step = -1;      // and every step from this one on (-1: none)
  double value = INFINITY;     // GradValue: the value written (inf, -inf, nan or finite)
  std::string params = "*";    // GradValue: parameter-name glob ("*", "h.0.*", "wte")
  int64_t count = 1;           // GradValue: elements written per matching grad
  double factor = 1.0;         // ActivationScale / LossScale / ScaleWeights: the multiplier
  std::string module;          // ScaleWeights: a module name of models::module_tree ("h.1.attn.c_proj", "fc.0")
  int64_t block = 0;           // ActivationScale: which block
  models::ActivationSite at =
      models::ActivationSite::Residual;  // ActivationScale: residual | mlp_input | mlp_input_spike
  bool compensate = true;                // LossScale: multiply the grads back by 1/factor after backward
  int64_t rank = -1;                     // data-parallel: only on this rank (-1: every rank)
  // BitFlip: the first parameter matching `params`, its gradient ("grad") or its value ("param" — the model's copy:
  // with fp32 master weights the masters' copy-back overwrites it the same step), element `element` of its flattened
  // storage, bit `bit` (0 = the lowest mantissa bit; 30 = fp32's highest exponent bit; up to 8 x element size - 1)
  bool flip_param = false;
  int64_t element = 0;
  int64_t bit = 0;
};

class Injector final : public engine::FaultHooks {
 public:
  explicit Injector(std::vector<InjectionConfig> cfgs) : cfgs_(std::move(cfgs)) {}
  bool empty() const { return cfgs_.empty(); }
  const std::vector<InjectionConfig>& configs() const { return cfgs_; }

  // The events without a `rank` or with this one.
  std::shared_ptr<const engine::FaultHooks> for_rank(int64_t rank) const override;
  bool scales_activations() const override;  // an ActivationScale event
  // ScaleWeights, once on the freshly built fp32 model (before it is cast or moved)
  void at_init(std::vector<models::NamedParameter>& params, std::vector<std::string>& events) const override;
  std::shared_ptr<const engine::FaultHooks> kept_in_reference() const override;  // the ScaleWeights events
  std::string reference_key_text() const override;  // " scale_weights=<module>x<factor>" per ScaleWeights event
  models::ForwardOptions forward_options(int64_t step, std::vector<std::string>& events) const override;
  // The product of the loss-scale factors on_loss applies at this step (1 if none): what the fused LM head must know
  // in its forward to form its gradient at the scale backward will bring.
  double loss_factor(int64_t step) const override;
  at::Tensor on_loss(const at::Tensor& loss, int64_t step, std::vector<std::string>& events) const override;
  void on_grads(const std::vector<models::NamedParameter>& params, int64_t step,
                std::vector<std::string>& events) const override;
  // LossScale compensation, right after backward (before the all-reduce point, probes and unscale).
  void after_backward(const std::vector<models::NamedParameter>& params, int64_t step) const override;

 private:
  std::vector<InjectionConfig> cfgs_;
};

// The planted events of a run (its RunConfig::faults, an Injector; empty where it has none).
const std::vector<InjectionConfig>& injections(const engine::RunConfig& run);
// Plants `cfgs` into the run in place of what it had (none: RunConfig::faults cleared).
void set_injections(engine::RunConfig& run, std::vector<InjectionConfig> cfgs);
// Plants `cfgs` after the events the run already has.
void add_injections(engine::RunConfig& run, const std::vector<InjectionConfig>& cfgs);

bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace ampcheck::inject
