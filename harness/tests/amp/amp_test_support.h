// Shared helpers for the ampcheck_amp tests (header-only, test code only): bitwise and tolerance comparisons done in
// float64 with the non-finite positions checked first; C++ twins of the two optimizers the PyTorch oracle uses
// (torch.optim.SGD with foreach=False, and torch.optim.AdamW(fused=True), which takes GradScaler's grad_scale and
// found_inf); a small two-layer model like PyTorch's own grad-scaling tests use; and running the Python oracle.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/grad_mode.h>
#include <ampcheck/amp/grad_scaler.h>
#include <ampcheck/amp/scalable_optimizer.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::amp::test {

inline std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << t.scalar_type() << t.sizes() << " on " << t.device();
  return os.str();
}

namespace detail {
inline std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

// Failure for the first position set in `bad`: how many, where, got and want.
inline ::testing::AssertionResult report(const char* what, const at::Tensor& bad, const at::Tensor& got64,
                                         const at::Tensor& want64) {
  const at::Tensor idx = bad.reshape(-1).nonzero();
  const int64_t n = idx.size(0);
  if (n == 0) return ::testing::AssertionSuccess();
  const int64_t first = idx[0][0].item<int64_t>();
  return ::testing::AssertionFailure() << what << " at " << n << " of " << bad.numel()
                                       << " elements; first at flat index " << first << ": got "
                                       << num(got64.reshape(-1)[first].item<double>()) << ", want "
                                       << num(want64.reshape(-1)[first].item<double>());
}

// dtype and shape must agree; both go to CPU float64 (exact for every float type we use). Then nan, +inf and -inf
// positions must agree before any finite value is compared.
inline ::testing::AssertionResult prepare(const at::Tensor& got, const at::Tensor& want, at::Tensor* g, at::Tensor* w) {
  if (got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << "dtype: got " << got.scalar_type() << ", want " << want.scalar_type();
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape: got " << got.sizes() << ", want " << want.sizes();
  *g = got.detach().to(at::kCPU).to(at::kDouble).contiguous();
  *w = want.detach().to(at::kCPU).to(at::kDouble).contiguous();
  if (auto r = report("nan positions differ", g->isnan() != w->isnan(), *g, *w); !r) return r;
  if (auto r = report("+inf positions differ", g->isposinf() != w->isposinf(), *g, *w); !r) return r;
  return report("-inf positions differ", g->isneginf() != w->isneginf(), *g, *w);
}
}  // namespace detail

// Bit-exact equality: same dtype and shape, same non-finite positions, same finite values and same sign of zero
// (float32/bfloat16 -> float64 is exact, so equal float64 values mean equal bits; NaN payloads are not compared).
inline ::testing::AssertionResult SameBits(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g, w;
  if (auto r = detail::prepare(got, want, &g, &w); !r) return r;
  const at::Tensor finite = w.isfinite();
  if (auto r = detail::report("values differ", finite & (g != w), g, w); !r) return r;
  return detail::report("sign of zero differs", finite & (g.signbit() != w.signbit()), g, w);
}

// |got - want| <= atol + rtol * |want| on finite positions, after the non-finite positions agree.
inline ::testing::AssertionResult AllClose(const at::Tensor& got, const at::Tensor& want, double rtol, double atol) {
  at::Tensor g, w;
  if (auto r = detail::prepare(got, want, &g, &w); !r) return r;
  const at::Tensor finite = w.isfinite();
  const at::Tensor bad = finite & ((g - w).abs() > atol + rtol * w.abs());
  return detail::report(("values differ beyond atol " + detail::num(atol) + " rtol " + detail::num(rtol)).c_str(), bad,
                        g, w);
}

// torch.optim.SGD(params, lr, momentum, foreach=False): _single_tensor_sgd with dampening 0, no weight decay, no
// nesterov. Parameters whose grad is undefined are skipped and get no momentum buffer, as in Python.
class Sgd : public ScalableOptimizer {
 public:
  Sgd(std::vector<at::Tensor> params, double lr, double momentum = 0.0)
      : params_(std::move(params)), lr_(lr), momentum_(momentum), buffers_(params_.size()) {}
  std::vector<at::Tensor> scaled_parameters() const override { return params_; }
  void step() override {
    at::NoGradGuard no_grad;
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& grad = params_[i].grad();
      if (!grad.defined()) continue;
      at::Tensor update = grad;
      if (momentum_ != 0.0) {
        if (!buffers_[i].defined()) buffers_[i] = grad.detach().clone();  // buf = grad.detach().clone()
        else
          // buf.mul_(momentum).add_(grad, alpha=1 - dampening). Python turns the float `momentum` into a wrapped
          // number tensor (mul_.Tensor); C++'s mul_(Scalar) would put the scalar first and round it to bfloat16
          // for bfloat16 buffers, which changes results -- so pass the wrapped number as Python does.
          buffers_[i].mul_(at::native::wrapped_scalar_tensor(momentum_)).add_(grad, 1);
        update = buffers_[i];
      }
      params_[i].add_(update, -lr_);  // param.add_(grad, alpha=-lr)
    }
  }
  int64_t steps_taken() const { return steps_; }
  const std::vector<at::Tensor>& params() const { return params_; }

 private:
  std::vector<at::Tensor> params_;
  double lr_, momentum_;
  std::vector<at::Tensor> buffers_;
  int64_t steps_ = 0;
};

// torch.optim.AdamW(params, lr, betas, eps, weight_decay, fused=True), i.e. adam.py's _init_group + _fused_adam with
// decoupled weight decay: state step is a float32 0-dim tensor on the param's device, exp_avg / exp_avg_sq are
// zeros_like(p); per (device, dtype) group: steps += 1, at::_fused_adamw_(..., grad_scale, found_inf), then
// steps -= found_inf, so a skipped step does not advance the count.
class FusedAdamW : public ScalableOptimizer {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  };
  FusedAdamW(std::vector<at::Tensor> params, Options o) : params_(std::move(params)), o_(o), state_(params_.size()) {}
  std::vector<at::Tensor> scaled_parameters() const override { return params_; }
  bool supports_amp_scaling() const override { return true; }
  void step() override { step_with(c10::nullopt, c10::nullopt); }
  void step_with_amp_scaling(const c10::optional<at::Tensor>& grad_scale, const at::Tensor& found_inf) override {
    step_with(grad_scale, found_inf);
  }
  // The AdamW state step of params[i] (undefined until its first step with a grad).
  const at::Tensor& state_step(size_t i) const { return state_[i].step; }

 private:
  struct State {
    at::Tensor step, exp_avg, exp_avg_sq;
  };
  struct Group {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  };
  void step_with(const c10::optional<at::Tensor>& grad_scale, const c10::optional<at::Tensor>& found_inf) {
    at::NoGradGuard no_grad;
    std::vector<Group> groups;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      State& s = state_[i];
      if (!s.step.defined()) {
        s.step = at::zeros({}, p.options().dtype(at::kFloat));
        s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.device == p.device() && g.dtype == p.scalar_type(); });
      if (it == groups.end()) it = groups.insert(groups.end(), Group{p.device(), p.scalar_type(), {}, {}, {}, {}, {}});
      it->params.push_back(p);
      it->grads.push_back(p.grad());
      it->exp_avgs.push_back(s.exp_avg);
      it->exp_avg_sqs.push_back(s.exp_avg_sq);
      it->steps.push_back(s.step);
    }
    for (Group& g : groups) {
      c10::optional<at::Tensor> dev_scale, dev_found;
      if (grad_scale && grad_scale->defined()) dev_scale = grad_scale->to(g.device, /*non_blocking=*/true);
      if (found_inf && found_inf->defined()) dev_found = found_inf->to(g.device, /*non_blocking=*/true);
      at::_foreach_add_(g.steps, 1);
      at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, g.steps, o_.lr, o_.beta1,
                        o_.beta2, o_.weight_decay, o_.eps, /*amsgrad=*/false, /*maximize=*/false, dev_scale, dev_found);
      if (dev_found) at::_foreach_sub_(g.steps, std::vector<at::Tensor>(g.steps.size(), *dev_found));
    }
  }
  std::vector<at::Tensor> params_;
  Options o_;
  std::vector<State> state_;
};

// The model of PyTorch's grad-scaling tests (torch.testing._internal.common_cuda._create_scaling_models_optimizers):
// Sequential(Linear(8, 8), Linear(8, 8)), parameters drawn from a seeded generator.
struct TwoLinear {
  at::Tensor w0, b0, w1, b1;
  static TwoLinear make(uint64_t seed, c10::Device device = at::kCPU) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    const double bound = 1.0 / std::sqrt(8.0);  // nn.Linear's init range for fan_in 8
    auto draw = [&](at::IntArrayRef shape) {
      return at::empty(shape).uniform_(-bound, bound, gen).to(device).set_requires_grad(true);
    };
    TwoLinear m;
    m.w0 = draw({8, 8});
    m.b0 = draw({8});
    m.w1 = draw({8, 8});
    m.b1 = draw({8});
    return m;
  }
  TwoLinear copy() const {  // same values, fresh leaves (the scaled run vs. its control)
    auto c = [](const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); };
    return {c(w0), c(b0), c(w1), c(b1)};
  }
  std::vector<at::Tensor> params() const { return {w0, b0, w1, b1}; }
  at::Tensor forward(const at::Tensor& x) const { return at::linear(at::linear(x, w0, b0), w1, b1); }
  void zero_grad() const {  // optimizer.zero_grad(): set_to_none=True
    for (at::Tensor p : params()) p.mutable_grad().reset();
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The Python oracle.

inline std::string python_exe() { return AMPCHECK_PYTHON; }
inline std::string oracle_script(const std::string& name) {
  return std::string(AMPCHECK_TESTS_DIR) + "/oracle/" + name;
}

// A fresh directory under $TMPDIR (or /tmp); removed with its (flat) contents on destruction unless keep() was
// called (kept on failure, so the oracle's files can be inspected). POSIX calls, not std::filesystem: the pip
// LibTorch (libtorch.so) exports its own std::filesystem symbols, which interpose and crash in remove_all().
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ampcheck_amp_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    if (keep_) return;
    if (DIR* d = opendir(path_.c_str())) {
      while (const dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) unlink(file(e->d_name).c_str());
      closedir(d);
    }
    rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `python script args...`, returning its exit status; stdout and stderr go to *output.
inline int run_python(const std::string& script, const std::vector<std::string>& args, std::string* output) {
  std::string cmd = shell_quote(python_exe()) + " " + shell_quote(oracle_script(script));
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace ampcheck::amp::test
