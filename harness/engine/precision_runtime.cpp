// PrecisionRuntime (precision_runtime.h): FP8's matmuls as the trainer's per-step precision state.
#include "engine/precision_runtime.h"

#include "engine/fp8.h"

namespace ampcheck::engine {

namespace {
class Fp8Runtime final : public PrecisionRuntime {
 public:
  Fp8Runtime(const Fp8Config& cfg, models::Model& model, const at::Device& device)
      : matmuls_(cfg, model.matmul_sites(), device) {
    model.set_matmul_override(&matmuls_);
  }
  void begin_step(bool probe) override { matmuls_.begin_step(probe); }
  void end_step() override { matmuls_.end_step(); }
  void discard() override { matmuls_.discard(); }
  void flush_into(trajectory::Trajectory& t) override { matmuls_.flush_into(t.fp8); }
  NamedTensors state() const override { return matmuls_.state(); }
  void load_state(const std::map<std::string, at::Tensor>& tensors, const std::string& path) override {
    matmuls_.load_state(tensors, path);
  }

 private:
  Fp8Matmuls matmuls_;
};
}  // namespace

std::unique_ptr<PrecisionRuntime> make_precision_runtime(const Strategy& strategy, models::Model& model,
                                                         const at::Device& device) {
  if (!strategy.fp8) return nullptr;
  return std::make_unique<Fp8Runtime>(*strategy.fp8, model, device);
}

}  // namespace ampcheck::engine
