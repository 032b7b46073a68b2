// PyTorch-oracle tests for ampcheck's GradScaler. harness/tests/oracle/gradscaler_oracle.py runs torch.amp.GradScaler
// (the installed PyTorch, AMPCHECK_PYTHON) for 300 steps over deterministic gradients with planted inf / -inf / nan /
// huge values, for parameters of mixed shapes, dtypes and grad layouts (contiguous, transposed, strided slice, no
// grad), with explicit unscale_() on some steps, two manual update(new_scale) calls, and either SGD with momentum or
// fused AdamW (the grad_scale / found_inf hand-over). Dtypes: float32 + bfloat16 on the CPU; on CUDA float32 (SGD)
// and float32 + float16 (fused AdamW, no explicit unscale_), because PyTorch's CUDA inf-check kernel has no bfloat16;
// fused AdamW on CUDA also gets contiguous grads only (its kernel requires grads laid out like the params).
// These tests feed the same input grads through our GradScaler and C++ twins of those optimizers and require
// bit-exact agreement at every step: found_inf, whether the step ran, the unscaled grads, the params (and AdamW's step
// count), the scale and the growth tracker. A second script, gradscaler_errors.py, records the type and text of every
// error Python raises for a misuse; the C++ scaler must raise the same (gradscaler_all.py runs the three in one
// process, once per device). PyTorchOracle.* run on the CPU; CudaGradScaler.* run the same comparisons on "cuda"
// (skipped where there is no CUDA device).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ampcheck/amp/grad_scaler.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "amp_test_support.h"

namespace ampcheck::amp {
namespace {

using test::FusedAdamW;
using test::SameBits;
using test::Sgd;
using test::TempDir;

struct ParamSpec {
  std::string name;
  at::ScalarType dtype;
  std::string layout;  // contiguous | transposed | sliced | nograd
  std::vector<int64_t> shape;
};

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return at::kFloat;
  if (s == "bfloat16") return at::kBFloat16;
  if (s == "float16") return at::kHalf;
  if (s == "int32") return at::kInt;
  throw std::runtime_error("oracle manifest: unknown dtype " + s);
}

// What gradscaler_oracle.py wrote: manifest.txt plus one raw little-endian .bin per array.
class OracleRun {
 public:
  explicit OracleRun(const std::string& dir) : dir_(dir) {
    std::ifstream in(dir + "/manifest.txt");
    if (!in) throw std::runtime_error("oracle manifest missing in " + dir);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string kind;
      ls >> kind;
      if (kind == "config") {
        std::string key, value;
        ls >> key >> value;
        config_[key] = value;
      } else if (kind == "param") {
        ParamSpec p;
        std::string dtype;
        ls >> p.name >> dtype >> p.layout;
        p.dtype = parse_dtype(dtype);
        for (int64_t d; ls >> d;) p.shape.push_back(d);
        params.push_back(p);
      } else if (kind == "unscale_steps") {
        for (int64_t s; ls >> s;) unscale_steps.insert(s);
      } else if (kind == "manual_update") {
        int64_t step;
        std::string how, value;
        ls >> step >> how >> value;
        manual_updates[step] = {how, std::strtod(value.c_str(), nullptr)};
      } else if (kind == "array") {
        std::string name, dtype;
        ls >> name >> dtype;
        std::vector<int64_t> shape;
        for (int64_t d; ls >> d;) shape.push_back(d);
        arrays_[name] = {parse_dtype(dtype), shape};
      }
    }
  }
  const std::string& config(const std::string& key) const { return config_.at(key); }
  double config_double(const std::string& key) const { return std::strtod(config(key).c_str(), nullptr); }
  int64_t config_int(const std::string& key) const { return std::stoll(config(key)); }

  // The array as a CPU tensor of the dtype and shape the manifest gives.
  at::Tensor array(const std::string& name) const {
    const auto& [dtype, shape] = arrays_.at(name);
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
    std::ifstream in(dir_ + "/" + name + ".bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() != t.nbytes())
      throw std::runtime_error("oracle array " + name + ": " + std::to_string(bytes.size()) + " bytes, want " +
                               std::to_string(t.nbytes()));
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    return t;
  }

  std::vector<ParamSpec> params;
  std::set<int64_t> unscale_steps;
  std::map<int64_t, std::pair<std::string, double>> manual_updates;

 private:
  std::string dir_;
  std::map<std::string, std::string> config_;
  std::map<std::string, std::pair<at::ScalarType, std::vector<int64_t>>> arrays_;
};

// The tensor that becomes param.grad, in the same layout as make_grad_holder() in the Python oracle.
at::Tensor make_grad_holder(const ParamSpec& p, c10::Device device) {
  const auto opts = at::TensorOptions().dtype(p.dtype).device(device);
  if (p.layout == "contiguous") return at::zeros(p.shape, opts);
  if (p.layout == "transposed") return at::zeros({p.shape[1], p.shape[0]}, opts).t();
  if (p.layout == "sliced") return at::zeros({p.shape[0], 2 * p.shape[1] + 1}, opts).slice(1, 1, c10::nullopt, 2);
  throw std::runtime_error("unknown grad layout " + p.layout);
}

// Replays the oracle's run through our GradScaler on `device` and stops at the first step that differs.
// One intra-op thread while replaying: the tensors are tiny, and on a busy 2-core machine every OpenMP hand-off in
// the CPU fused AdamW kernel can cost milliseconds (10 s instead of 2 s for the run). Results do not depend on it:
// every op replayed is elementwise.
class SingleThreadScope {
 public:
  SingleThreadScope() : previous_(at::get_num_threads()) { at::set_num_threads(1); }
  ~SingleThreadScope() { at::set_num_threads(previous_); }

 private:
  int previous_;
};

void ReplayAndCompare(const OracleRun& o, c10::Device device) {
  const bool fused = o.config("optimizer") == "adamw_fused";
  const int64_t steps = o.config_int("steps");
  const size_t n = o.params.size();
  SingleThreadScope single_thread;

  std::vector<at::Tensor> params(n), holders(n), grad_in(n), grad_out(n), param_out(n), adam_step(n);
  for (size_t i = 0; i < n; ++i) {
    const ParamSpec& spec = o.params[i];
    params[i] = o.array("init." + spec.name).to(device).set_requires_grad(true);
    param_out[i] = o.array("param_out." + spec.name);
    if (spec.layout == "nograd") continue;
    holders[i] = make_grad_holder(spec, device);
    ASSERT_EQ(holders[i].is_contiguous(), spec.layout == "contiguous") << spec.name << ": grad layout " << spec.layout;
    params[i].mutable_grad() = holders[i];
    grad_in[i] = o.array("grad_in." + spec.name);
    grad_out[i] = o.array("grad_out." + spec.name);
    if (fused) adam_step[i] = o.array("adam_step." + spec.name);
  }
  const at::Tensor want_scale = o.array("scale"), want_tracker = o.array("growth_tracker");
  const at::Tensor want_found = o.array("found_inf");

  std::unique_ptr<ScalableOptimizer> opt;
  FusedAdamW* adam = nullptr;
  if (fused) {
    auto a = std::make_unique<FusedAdamW>(
        params,
        FusedAdamW::Options{o.config_double("adam_lr"), o.config_double("adam_beta1"), o.config_double("adam_beta2"),
                            o.config_double("adam_eps"), o.config_double("adam_weight_decay")});
    adam = a.get();
    opt = std::move(a);
  } else {
    opt = std::make_unique<Sgd>(params, o.config_double("lr"), o.config_double("momentum"));
  }
  GradScaler scaler(device.type(),
                    GradScalerOptions{o.config_double("init_scale"), o.config_double("growth_factor"),
                                      o.config_double("backoff_factor"), o.config_int("growth_interval"), true});
  ASSERT_TRUE(scaler.is_enabled());

  for (int64_t k = 0; k < steps; ++k) {
    for (size_t i = 0; i < n; ++i)
      if (holders[i].defined()) holders[i].copy_(scaler.scale(grad_in[i][k].to(device)));
    if (o.unscale_steps.count(k)) scaler.unscale_(*opt);
    const bool ran = scaler.step(*opt);

    const double want_found_k = want_found[k].item<double>();
    ASSERT_EQ(scaler.found_inf(*opt).item<double>(), want_found_k) << "step " << k << ": found_inf after step()";
    // Non-fused: step() ran the optimizer iff no inf was found. Fused: it is always called and skips on device.
    if (!fused) ASSERT_EQ(ran, want_found_k == 0.0) << "step " << k << ": whether optimizer.step() ran";
    for (size_t i = 0; i < n; ++i) {
      const std::string& name = o.params[i].name;
      if (holders[i].defined()) {
        ASSERT_TRUE(params[i].grad().is_same(holders[i])) << "step " << k << ", " << name << ": .grad was replaced";
        ASSERT_TRUE(SameBits(holders[i], grad_out[i][k])) << "step " << k << ", " << name << ": .grad after step()";
        if (fused)
          ASSERT_TRUE(SameBits(adam->state_step(i), adam_step[i][k])) << "step " << k << ", " << name << ": AdamW step";
      } else {
        ASSERT_FALSE(params[i].grad().defined()) << "step " << k << ", " << name << ": a grad appeared";
      }
      ASSERT_TRUE(SameBits(params[i], param_out[i][k])) << "step " << k << ", " << name << ": param after step()";
    }

    if (auto it = o.manual_updates.find(k); it != o.manual_updates.end()) {
      const auto& [how, value] = it->second;
      if (how == "float") scaler.update(value);
      else
        scaler.update(at::scalar_tensor(value, at::TensorOptions().dtype(at::kFloat).device(device)));
    } else {
      scaler.update();
    }
    ASSERT_TRUE(SameBits(scaler.scale_tensor(), want_scale[k])) << "step " << k << ": scale after update()";
    ASSERT_EQ(scaler.get_growth_tracker(), want_tracker[k].item<int64_t>()) << "step " << k << ": growth tracker";
  }
}

// The oracle's run must exercise what it is meant to: many skipped steps, many growths, explicit unscale_ steps.
void ExpectOracleRunIsRich(const OracleRun& o) {
  const at::Tensor scale = o.array("scale").to(at::kDouble), found = o.array("found_inf");
  const int64_t skipped = (found != 0).sum().item<int64_t>();
  const int64_t growths = (scale.slice(0, 1) > scale.slice(0, 0, -1)).sum().item<int64_t>();
  EXPECT_GE(skipped, 20) << "the oracle run skips too few steps to test the skip path";
  EXPECT_GE(growths, 20) << "the oracle run grows the scale too rarely to test growth";
  if (o.config("explicit_unscale") == "1")  // off only with float16 grads, which unscale_() refuses
    EXPECT_GE(o.unscale_steps.size(), 50u) << "too few explicit unscale_() steps";
}

// What the Python oracles wrote for one device: both optimizers' traces and the error cases, from one process
// (gradscaler_all.py runs gradscaler_oracle.py twice and gradscaler_errors.py; a torch import, not three), once per
// test process and device.
struct OracleFiles {
  TempDir sgd, adamw_fused, errors;
  int rc = -1;
  std::string log;
  const TempDir& trace(const std::string& optimizer) const { return optimizer == "sgd" ? sgd : adamw_fused; }
};

OracleFiles& oracle_files(c10::Device device) {
  static std::map<std::string, std::unique_ptr<OracleFiles>> by_device;
  const std::string name = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  auto& files = by_device[name];
  if (!files) {
    files = std::make_unique<OracleFiles>();
    files->rc = test::run_python("gradscaler_all.py",
                                 {"--device", name, "--sgd-out", files->sgd.path(), "--adamw-fused-out",
                                  files->adamw_fused.path(), "--errors-out", files->errors.file("errors.tsv")},
                                 &files->log);
  }
  return *files;
}

void RunTraceOracle(const std::string& optimizer, c10::Device device) {
  OracleFiles& files = oracle_files(device);
  ASSERT_EQ(files.rc, 0) << "the Python oracle failed (" << test::python_exe() << "):\n" << files.log;
  const TempDir& dir = files.trace(optimizer);
  const OracleRun oracle(dir.path());
  ExpectOracleRunIsRich(oracle);
  ReplayAndCompare(oracle, device);
  if (::testing::Test::HasFailure()) {
    (optimizer == "sgd" ? files.sgd : files.adamw_fused).keep();
    ADD_FAILURE() << "oracle files kept in " << dir.path() << " (" << files.log << ")";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Error types and texts.

const char* type_name(GradScalerError::PythonType t) {
  switch (t) {
    case GradScalerError::PythonType::ValueError:
      return "ValueError";
    case GradScalerError::PythonType::RuntimeError:
      return "RuntimeError";
    case GradScalerError::PythonType::AssertionError:
      return "AssertionError";
  }
  return "?";
}

// {Python exception type name, message}; {"none", ""} if nothing was thrown. ATen errors carry Python's mapping.
std::pair<std::string, std::string> Trigger(const std::function<void()>& fn) {
  try {
    fn();
    return {"none", ""};
  } catch (const GradScalerError& e) {
    return {type_name(e.python_type()), e.what()};
  } catch (const c10::ValueError& e) {
    return {"ValueError", e.what_without_backtrace()};
  } catch (const c10::NotImplementedError& e) {
    return {"NotImplementedError", e.what_without_backtrace()};
  } catch (const c10::TypeError& e) {
    return {"TypeError", e.what_without_backtrace()};
  } catch (const c10::Error& e) {
    return {"RuntimeError", e.what_without_backtrace()};
  } catch (const std::exception& e) {
    return {"std::exception (no Python twin)", e.what()};
  }
}

// One lambda per case of gradscaler_errors.py, by the same name, doing the same thing.
std::map<std::string, std::function<void()>> ErrorCases(c10::Device device) {
  const c10::DeviceType dt = device.type();
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  auto scaler = [dt](GradScalerOptions o = {}) { return GradScaler(dt, o); };
  auto param = [device](at::ScalarType dtype, bool with_grad) {
    at::Tensor p = at::zeros({3}, at::TensorOptions().dtype(dtype).device(device)).set_requires_grad(true);
    if (with_grad) p.mutable_grad() = at::ones({3}, p.options().requires_grad(false));
    return p;
  };
  auto started = [=](GradScalerOptions o = {}) {
    GradScaler s(dt, o);
    s.scale(at::ones({}, f32));
    return s;
  };
  auto update_after_step = [=](at::Tensor new_scale) {
    GradScaler s = started();
    Sgd o({param(at::kFloat, true)}, 1.0);
    s.step(o);
    s.update(new_scale);
  };
  GradScalerOptions disabled;
  disabled.enabled = false;
  auto with = [](double growth, double backoff, bool enabled = true) {
    GradScalerOptions o;
    o.growth_factor = growth;
    o.backoff_factor = backoff;
    o.enabled = enabled;
    return o;
  };
  const double nan = std::nan("");
  return {
      {"fp16_unscale",
       [=] {
         Sgd o({param(at::kHalf, true)}, 1.0);
         started().unscale_(o);
       }},
      {"fp16_step",
       [=] {
         Sgd o({param(at::kHalf, true)}, 1.0);
         started().step(o);
       }},
      {"unscale_twice",
       [=] {
         GradScaler s = started();
         Sgd o({param(at::kFloat, true)}, 1.0);
         s.unscale_(o);
         s.unscale_(o);
       }},
      {"unscale_after_step",
       [=] {
         GradScaler s = started();
         Sgd o({param(at::kFloat, true)}, 1.0);
         s.step(o);
         s.unscale_(o);
       }},
      {"step_twice",
       [=] {
         GradScaler s = started();
         Sgd o({param(at::kFloat, true)}, 1.0);
         s.step(o);
         s.step(o);
       }},
      {"unscale_before_scale",
       [=] {
         Sgd o({param(at::kFloat, true)}, 1.0);
         scaler().unscale_(o);
       }},
      {"step_before_scale",
       [=] {
         Sgd o({param(at::kFloat, true)}, 1.0);
         scaler().step(o);
       }},
      {"update_before_scale", [=] { scaler().update(); }},
      {"update_without_inf_checks", [=] { started().update(); }},
      {"step_without_grads",
       [=] {
         Sgd o({param(at::kFloat, false)}, 1.0);
         started().step(o);
       }},
      {"load_empty_state_dict", [=] { scaler().load_state_dict(scaler(disabled).state_dict()); }},
      {"growth_factor_one", [=] { scaler(with(1.0, 0.5)); }},
      {"backoff_factor_one", [=] { scaler(with(2.0, 1.0)); }},
      {"nan_growth_factor", [=] { scaler(with(nan, 0.5)); }},
      {"nan_backoff_factor", [=] { scaler(with(2.0, nan)); }},
      {"bad_factors_when_disabled", [=] { scaler(with(0.5, 2.0, false)); }},
      {"update_tensor_two_elements", [=] { update_after_step(at::full({2}, 8.0, f32)); }},
      {"update_tensor_requires_grad", [=] { update_after_step(at::full({}, 8.0, f32).set_requires_grad(true)); }},
      {"update_tensor_other_device", [=] { update_after_step(at::full({}, 8.0, f32.device(at::kMeta))); }},
      {"update_tensor_shape_one", [=] { update_after_step(at::full({1}, 8.0, f32)); }},
      {"update_tensor_zero_dim", [=] { update_after_step(at::full({}, 8.0, f32)); }},
      {"bf16_unscale",
       [=] {
         Sgd o({param(at::kBFloat16, true)}, 1.0);
         started().unscale_(o);
       }},
  };
}

void CompareErrors(c10::Device device) {
  const OracleFiles& files = oracle_files(device);
  ASSERT_EQ(files.rc, 0) << "the Python oracle failed (" << test::python_exe() << "):\n" << files.log;
  const std::string out = files.errors.file("errors.tsv");

  auto cases = ErrorCases(device);
  std::ifstream in(out);
  std::string line;
  std::set<std::string> seen;
  while (std::getline(in, line)) {
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    ASSERT_NE(t2, std::string::npos) << "malformed oracle line: " << line;
    const std::string key = line.substr(0, t1), want_type = line.substr(t1 + 1, t2 - t1 - 1);
    const std::string want_message = line.substr(t2 + 1);
    seen.insert(key);
    auto it = cases.find(key);
    if (it == cases.end()) {
      ADD_FAILURE() << "case " << key << ": the Python oracle has it, the C++ test does not";
      continue;
    }
    const auto [got_type, got_message] = Trigger(it->second);
    EXPECT_EQ(got_type, want_type) << "case " << key << ": exception type (message: " << got_message << ")";
    EXPECT_EQ(got_message, want_message) << "case " << key << ": exception text";
  }
  for (const auto& [key, fn] : cases)
    EXPECT_TRUE(seen.count(key)) << "case " << key << ": missing from the Python oracle";
}

// ---------------------------------------------------------------------------------------------------------------

TEST(PyTorchOracle, SgdTraceMatchesBitExact) { RunTraceOracle("sgd", at::kCPU); }

TEST(PyTorchOracle, FusedAdamWTraceMatchesBitExact) { RunTraceOracle("adamw_fused", at::kCPU); }

TEST(PyTorchOracle, ErrorTypesAndTextsMatch) { CompareErrors(at::kCPU); }

TEST(CudaGradScaler, SgdTraceMatchesPyTorchBitExact) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  RunTraceOracle("sgd", c10::Device(at::kCUDA, 0));
}

TEST(CudaGradScaler, FusedAdamWTraceMatchesPyTorchBitExact) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  RunTraceOracle("adamw_fused", c10::Device(at::kCUDA, 0));
}

TEST(CudaGradScaler, ErrorTypesAndTextsMatchPyTorch) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  CompareErrors(c10::Device(at::kCUDA, 0));
}

}  // namespace
}  // namespace ampcheck::amp
