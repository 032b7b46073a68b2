// Injector implementation.
#include "inject/injection.h"

#include "io/text.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace ampcheck::inject {

bool glob_match(const std::string& pattern, const std::string& name) {
  // '*' matches any run, '?' one character.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, mark = n;
    } else if (star != std::string::npos) {
      p = star + 1, n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {
bool fires(const InjectionConfig& c, int64_t step) {
  return (c.from_step >= 0 && step >= c.from_step) || std::find(c.steps.begin(), c.steps.end(), step) != c.steps.end();
}
}  // namespace

void Injector::at_init(std::vector<models::NamedParameter>& params, std::vector<std::string>& events) const {
  at::NoGradGuard no_grad;
  for (const auto& c : cfgs_) {
    if (c.kind != InjectionKind::ScaleWeights) continue;
    int hits = 0;
    for (auto& p : params) {
      const bool bias = p.name.size() >= 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
      if (bias || !models::parameter_in_module(p.name, c.module)) continue;
      p.tensor.mul_(c.factor);
      ++hits;
    }
    events.push_back("init: the weights of " + c.module + " (" + std::to_string(hits) + " tensor(s)) scaled by " +
                     io::number_text(c.factor, 6));
  }
}

std::shared_ptr<const engine::FaultHooks> Injector::for_rank(int64_t rank) const {
  std::vector<InjectionConfig> mine;
  for (const auto& c : cfgs_)
    if (c.rank < 0 || c.rank == rank) mine.push_back(c);
  return std::make_shared<Injector>(std::move(mine));
}

bool Injector::scales_activations() const {
  for (const auto& c : cfgs_)
    if (c.kind == InjectionKind::ActivationScale) return true;
  return false;
}

std::shared_ptr<const engine::FaultHooks> Injector::kept_in_reference() const {
  std::vector<InjectionConfig> model_faults;
  for (const auto& c : cfgs_)
    if (c.kind == InjectionKind::ScaleWeights) model_faults.push_back(c);
  return model_faults.empty() ? nullptr : std::make_shared<Injector>(std::move(model_faults));
}

std::string Injector::reference_key_text() const {
  std::ostringstream os;
  os.precision(17);  // as the reference key's own numbers (reference_store.cpp)
  for (const auto& c : cfgs_)
    if (c.kind == InjectionKind::ScaleWeights) os << " scale_weights=" << c.module << "x" << c.factor;
  return os.str();
}

models::ForwardOptions Injector::forward_options(int64_t step, std::vector<std::string>& events) const {
  models::ForwardOptions o;
  for (const auto& c : cfgs_) {
    if (c.kind != InjectionKind::ActivationScale || !fires(c, step)) continue;
    o.hidden_scale = c.factor;
    o.hidden_scale_block = c.block;
    o.hidden_scale_at = c.at;
    const char* where = c.at == models::ActivationSite::MlpInput ? "MLP input of block "
                        : c.at == models::ActivationSite::MlpInputSpike
                            ? "c_fc matmul input (output divided back) of block "
                            : "hidden state after block ";
    events.push_back("step " + std::to_string(step) + ": " + where + std::to_string(c.block) + " scaled by " +
                     io::number_text(c.factor, 6));
  }
  return o;
}

double Injector::loss_factor(int64_t step) const {
  double k = 1.0;
  for (const auto& c : cfgs_)
    if (c.kind == InjectionKind::LossScale && fires(c, step)) k *= c.factor;
  return k;
}

at::Tensor Injector::on_loss(const at::Tensor& loss, int64_t step, std::vector<std::string>& events) const {
  at::Tensor out = loss;
  for (const auto& c : cfgs_) {
    if (!fires(c, step)) continue;
    if (c.kind == InjectionKind::LossScale) {
      out = out * c.factor;
      if (step == c.from_step || c.from_step < 0)
        events.push_back("step " + std::to_string(step) + ": loss scaled by " + io::number_text(c.factor, 6) +
                         " before backward" + (c.from_step >= 0 ? " (and every step after)" : "") +
                         (c.compensate ? ", grads scaled back" : ""));
    } else if (c.kind == InjectionKind::NanLoss) {
      out = out * std::numeric_limits<double>::quiet_NaN();
      events.push_back("step " + std::to_string(step) + ": loss set to NaN");
    }
  }
  return out;
}

void Injector::after_backward(const std::vector<models::NamedParameter>& params, int64_t step) const {
  at::NoGradGuard no_grad;
  for (const auto& c : cfgs_) {
    if (c.kind != InjectionKind::LossScale || !c.compensate || !fires(c, step)) continue;
    for (const auto& p : params) {
      at::Tensor g = p.tensor.grad();
      if (!g.defined()) continue;
      // in fp32, then back to the grad's dtype: zeros stay zero, survivors regain their magnitude
      g.copy_(g.to(at::kFloat).mul_(1.0 / c.factor));
    }
  }
}

namespace {
// flips bit c.bit of element c.element of the first matching parameter's value or gradient, through an integer view of
// its storage (the same bits whatever the float format)
void flip_bit(const InjectionConfig& c, const std::vector<models::NamedParameter>& params, int64_t step,
              std::vector<std::string>& events) {
  for (const auto& p : params) {
    if (!glob_match(c.params, p.name)) continue;
    at::Tensor t = c.flip_param ? p.tensor.detach() : p.tensor.grad();
    const std::string what = p.name + (c.flip_param ? "" : " grad");
    if (!t.defined()) {
      events.push_back("step " + std::to_string(step) + ": no bit flipped: " + what + " is undefined");
      return;
    }
    at::Tensor flat = t.view({-1});
    const int64_t bits = 8 * static_cast<int64_t>(t.element_size());
    if (c.element >= flat.numel() || c.bit >= bits)
      throw std::invalid_argument("inject bitflip: element " + std::to_string(c.element) + " bit " +
                                  std::to_string(c.bit) + " outside " + what + " (" + std::to_string(flat.numel()) +
                                  " elements of " + std::to_string(bits) + " bits)");
    const double before = flat[c.element].item<double>();  // SYNC POINT (a planted event; never on the hot path)
    at::Tensor word = flat.view(bits == 64 ? at::kLong : bits == 32 ? at::kInt : at::kShort).narrow(0, c.element, 1);
    const int64_t mask = bits == 64   ? static_cast<int64_t>(uint64_t{1} << c.bit)
                         : bits == 32 ? static_cast<int64_t>(static_cast<int32_t>(uint32_t{1} << c.bit))
                                      : static_cast<int64_t>(static_cast<int16_t>(static_cast<uint16_t>(1u << c.bit)));
    word.bitwise_xor_(mask);
    events.push_back("step " + std::to_string(step) + ": flipped bit " + std::to_string(c.bit) + " of element " +
                     std::to_string(c.element) + " of " + what + ": " + io::number_text(before, 6) + " -> " +
                     io::number_text(flat[c.element].item<double>(), 6));
    return;
  }
}
}  // namespace

void Injector::on_grads(const std::vector<models::NamedParameter>& params, int64_t step,
                        std::vector<std::string>& events) const {
  at::NoGradGuard no_grad;
  for (const auto& c : cfgs_) {
    if (c.kind == InjectionKind::BitFlip && fires(c, step)) {
      flip_bit(c, params, step, events);
      continue;
    }
    if (c.kind != InjectionKind::GradValue || !fires(c, step)) continue;
    int hits = 0;
    for (const auto& p : params) {
      if (!glob_match(c.params, p.name) || !p.tensor.grad().defined()) continue;
      at::Tensor flat = p.tensor.grad().view({-1});
      flat.slice(0, 0, std::min<int64_t>(c.count, flat.numel())).fill_(c.value);
      ++hits;
    }
    events.push_back("step " + std::to_string(step) + ": wrote " + io::number_text(c.value, 6) + " into " +
                     std::to_string(hits) + " grad(s) matching '" + c.params + "'");
  }
}

// ---------------------------------------------------------------------------------------------------------------
// a run's planted events

const std::vector<InjectionConfig>& injections(const engine::RunConfig& run) {
  static const std::vector<InjectionConfig> none;
  if (!run.faults) return none;
  const auto* injector = dynamic_cast<const Injector*>(run.faults.get());
  if (!injector)
    throw std::logic_error("run " + run.name + ": its planted events (RunConfig::faults) are no inject::Injector");
  return injector->configs();
}

void set_injections(engine::RunConfig& run, std::vector<InjectionConfig> cfgs) {
  if (cfgs.empty()) run.faults = nullptr;
  else
    run.faults = std::make_shared<Injector>(std::move(cfgs));
}

void add_injections(engine::RunConfig& run, const std::vector<InjectionConfig>& cfgs) {
  std::vector<InjectionConfig> all = injections(run);
  all.insert(all.end(), cfgs.begin(), cfgs.end());
  set_injections(run, std::move(all));
}

}  // namespace ampcheck::inject
