// FaultHooks — planted numerical events (a test feature: `inject:` in a scenario, `ampcheck validate --plant`) as the
// trainer sees them. harness/inject/ implements it; RunConfig::faults holds it (null: a run without planted events,
// the trainer then calls nothing). The engine knows nothing of what is planted; it calls the hooks at fixed points:
//   forward_options  before each micro-batch's forward: activation scaling inside the forward (ForwardOptions)
//   on_loss          after the forward, before backward: the loss scaled or made NaN (loss_factor: the product of
//                    the scale factors on_loss applies, which the fused LM head needs in its forward)
//   after_backward   right after the micro-batches' backward: underflow compensation (before the gradient sync point)
//   on_grads         after backward, before the gradient sync point, probes and unscale: gradient values, bit flips
// Every application appends an event ("step 12: wrote inf into 1 grad(s) matching 'h.0.*'") to `events`, which the
// trainer keeps in the trajectory. The hooks are const: one set may be shared by copies of a RunConfig.
#pragma once

#include "models/model.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampcheck::engine {

class FaultHooks {
 public:
  virtual ~FaultHooks() = default;
  // The events that fire on data-parallel rank `rank` (an event may be pinned to one rank); asked once per rank.
  virtual std::shared_ptr<const FaultHooks> for_rank(int64_t rank) const = 0;
  // Whether an event scales activations inside the forward (engine options that replace the forward's ops decline).
  virtual bool scales_activations() const = 0;
  // Once, on the freshly built fp32 model (before it is cast or moved): faults that are part of the model.
  virtual void at_init(std::vector<models::NamedParameter>& params, std::vector<std::string>& events) const = 0;
  // What of these faults an FP32 reference of the run keeps (those that are part of the model; null: none), and their
  // text in the reference key ("" if none).
  virtual std::shared_ptr<const FaultHooks> kept_in_reference() const = 0;
  virtual std::string reference_key_text() const = 0;

  virtual models::ForwardOptions forward_options(int64_t step, std::vector<std::string>& events) const = 0;
  virtual double loss_factor(int64_t step) const = 0;
  virtual at::Tensor on_loss(const at::Tensor& loss, int64_t step, std::vector<std::string>& events) const = 0;
  virtual void after_backward(const std::vector<models::NamedParameter>& params, int64_t step) const = 0;
  virtual void on_grads(const std::vector<models::NamedParameter>& params, int64_t step,
                        std::vector<std::string>& events) const = 0;
};

}  // namespace ampcheck::engine
