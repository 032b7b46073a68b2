// Minimal use of ampcheck::amp::GradScaler from another LibTorch program: SGD on a 2-parameter model, one step with
// an injected inf (skipped, scale halves) and one clean step (applied). Exits non-zero if either does not happen.
#include <ampcheck/amp/grad_scaler.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <iostream>

struct Sgd : ampcheck::amp::ScalableOptimizer {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> scaled_parameters() const override { return params; }
  void step() override {
    at::NoGradGuard g;
    for (auto& p : params) p.sub_(p.grad(), 0.1);
  }
};

int main() {
  Sgd opt;
  opt.params = {at::ones({2}).requires_grad_(true)};
  ampcheck::amp::GradScaler scaler(at::kCPU);
  auto iteration = [&](bool poison) {
    opt.params[0].mutable_grad() = at::Tensor();
    at::Tensor loss = (opt.params[0] * 2).sum();
    scaler.scale(loss).backward();
    if (poison) opt.params[0].mutable_grad()[0] = INFINITY;
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  const bool first = iteration(true), second = iteration(false);
  const double p = opt.params[0][0].item<double>();
  std::cout << "skipped=" << !first << " stepped=" << second << " scale=" << scaler.get_scale() << " p=" << p << "\n";
  const bool ok = !first && second && scaler.get_scale() == 32768.0 && std::abs(p - 0.8) < 1e-6;
  return ok ? 0 : 1;
}
