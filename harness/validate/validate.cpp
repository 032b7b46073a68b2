// `ampcheck validate`'s pieces (validate.h).
#include "validate/validate.h"

#include "engine/device.h"
#include "engine/digest.h"
#include "engine/trainer.h"
#include "inject/injection.h"
#include "models/model.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unistd.h>

namespace ampcheck::validate {

namespace {
const std::string& value_of(const Fingerprint& fp, const std::string& key) {
  static const std::string none;
  for (const auto& [k, v] : fp)
    if (k == key) return v;
  return none;
}
// "cuda-sm90" -> 90; -1 where the class is not a CUDA one
int sm_of(const std::string& cls) {
  if (cls.rfind("cuda-sm", 0) != 0) return -1;
  try {
    return std::stoi(cls.substr(7));
  } catch (...) {
    return -1;
  }
}
std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
}  // namespace

void settle_process() {
  at::set_num_threads(1);
  ::setenv("CUBLAS_WORKSPACE_CONFIG", engine::kDeterministicCublasWorkspace, /*overwrite=*/0);
}

std::string golden_class(const Fingerprint& fp) {
  const std::string& cls = value_of(fp, "device_class");
  if (cls != "cpu") return cls;
  std::string cap = value_of(fp, "aten_cpu_capability");
  std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return std::tolower(c); });
  return cap.empty() ? cls : cls + "-" + cap;
}

std::string golden_path(const std::string& root, const std::string& cls, const std::string& scenario) {
  return root + "/validate/" + cls + "/" + scenario + ".h5";
}

std::vector<std::string> nearest_classes(const std::string& wanted, const std::vector<std::string>& available) {
  const int sm = sm_of(wanted);
  // rank: 0 same family (GPU), 1 another GPU, 2 a CPU (for a GPU); for a CPU: 0 another CPU, 1 a GPU
  auto rank = [&](const std::string& c) -> std::pair<int, int> {
    const int other = sm_of(c);
    if (sm >= 0) {
      if (other >= 0 && other / 10 == sm / 10) return {0, std::abs(other - sm)};
      if (other >= 0) return {1, std::abs(other - sm)};
      return {2, 0};
    }
    return other >= 0 ? std::make_pair(1, other) : std::make_pair(0, 0);
  };
  std::vector<std::string> out;
  for (const auto& c : available)
    if (c != wanted && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  // ties (equally far architectures) go to the older one, then by name
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return std::make_tuple(rank(a), sm_of(a), a) < std::make_tuple(rank(b), sm_of(b), b);
  });
  return out;
}

bool is_environment_key(const std::string& key) { return key.rfind("env_", 0) == 0; }

bool changes_bits(const std::string& key, bool cuda) {
  // the thread-count variables: validate runs on one intra-op thread (at::set_num_threads(1), which MKL and OpenMP
  // follow), so they do not reach its bits; the `threads` key holds the count in effect
  static const std::set<std::string> no = {"cuda_driver",         "nvidia_driver",       "nccl",
                                           "device_memory_bytes", "env_OMP_NUM_THREADS", "env_MKL_NUM_THREADS",
                                           "env_MKL_DYNAMIC"};
  // a GPU run's CPU work is the initial weights' sampling (ATen's CPU kernels: aten_cpu_capability decides them) and
  // integer data generation; the CPU model and its other extensions do not reach its bits
  static const std::set<std::string> cpu_only = {"cpu_model", "cpu_isa"};
  // NCCL's settings choose how collectives run; validate's runs are one process and call none (named, not drift; a
  // data-parallel validation would count them)
  if (key.rfind("env_NCCL_", 0) == 0) return false;
  return no.count(key) == 0 && !(cuda && cpu_only.count(key));
}

std::vector<StackDifference> stack_differences(const std::map<std::string, std::string>& golden_attributes,
                                               const Fingerprint& here) {
  std::vector<StackDifference> out;
  const bool cuda = value_of(here, "device_class").rfind("cuda", 0) == 0;
  for (const auto& [k, v] : here) {
    auto it = golden_attributes.find("stack_" + k);
    // an environment setting the golden's ampcheck did not record: the same as unset there (what it ran with, unless
    // it was set — which an older ampcheck could not know)
    // (CUBLAS_WORKSPACE_CONFIG excepted: every deterministic ampcheck run set it to its own default before cuBLAS's
    // first use, so an older golden ran with that)
    const std::string g = it != golden_attributes.end()        ? it->second
                          : k == "env_CUBLAS_WORKSPACE_CONFIG" ? std::string(engine::kDeterministicCublasWorkspace)
                          : is_environment_key(k)              ? std::string(engine::kUnset)
                                                               : "(not recorded)";
    if (g != v) out.push_back({k, g, v, changes_bits(k, cuda)});
  }
  // a setting the golden recorded as set (a CUBLAS_* one, say) that is not set here
  for (const auto& [attr, g] : golden_attributes) {
    if (attr.rfind("stack_env_", 0) != 0 || g == engine::kUnset) continue;
    const std::string k = attr.substr(6);
    if (std::none_of(here.begin(), here.end(), [&](const auto& kv) { return kv.first == k; }))
      out.push_back({k, g, engine::kUnset, changes_bits(k, cuda)});
  }
  return out;
}

std::string describe(const std::vector<StackDifference>& diffs) {
  std::ostringstream os;
  for (size_t i = 0; i < diffs.size(); ++i) {
    const auto& d = diffs[i];
    const std::string key = is_environment_key(d.key) ? "env " + d.key.substr(4) : d.key;
    os << (i ? "; " : "") << key << ": " << (d.golden.empty() ? "(none)" : d.golden) << " -> "
       << (d.here.empty() ? "(none)" : d.here);
  }
  return os.str();
}

BitwiseComparison compare_bitwise(const trajectory::Trajectory& run, const trajectory::Trajectory& golden) {
  BitwiseComparison c;
  const bool digests = !run.digests.empty() && !golden.digests.empty() && run.digests.tensors == golden.digests.tensors;
  const int64_t n = std::min(run.size(), golden.size());
  // the columns that a correct stack computes bit for bit the same (the step time never is)
  std::vector<int> columns;
  for (int col = 0; col < trajectory::kNumColumns; ++col)
    if (col != trajectory::kStepTimeMs) columns.push_back(col);
  auto column_differs = [&](int64_t s, int col) { return !same_bits(run.rows[s][col], golden.rows[s][col]); };
  auto tensor_diffs = [&](int64_t s, std::string& first) {
    int64_t count = 0;
    if (!digests || s >= static_cast<int64_t>(run.digests.grads.size()) ||
        s >= static_cast<int64_t>(golden.digests.grads.size()))
      return count;
    const auto& names = run.digests.tensors;
    for (size_t i = 0; i < names.size(); ++i)  // gradients first: the step computes them before it updates
      if (run.digests.grads[s][i] != golden.digests.grads[s][i] && count++ == 0) first = "gradient of " + names[i];
    for (size_t i = 0; i < names.size(); ++i)
      if (run.digests.params[s][i] != golden.digests.params[s][i] && count++ == 0) first = "parameter " + names[i];
    return count;
  };
  for (int64_t s = 0; s < n && c.step < 0; ++s) {
    std::string first_tensor;
    const int64_t tensors = tensor_diffs(s, first_tensor);
    std::string first_column;
    if (column_differs(s, trajectory::kLoss)) first_column = trajectory::column_name(trajectory::kLoss);
    for (int col : columns)
      if (first_column.empty() && col != trajectory::kLoss && column_differs(s, col))
        first_column = trajectory::column_name(col);
    if (tensors > 0 || !first_column.empty()) {
      c.step = s;
      c.column = first_column;
      c.tensor = first_tensor;
      c.tensors_differing = tensors;
    }
  }
  std::ostringstream m;
  if (c.step < 0 && run.size() == golden.size()) {
    c.identical = true;
    m << "identical: " << n << " steps, every column"
      << (digests
              ? " and the digests of " + std::to_string(run.digests.tensors.size()) + " parameters and their gradients"
              : " (no tensor digests to compare)");
  } else if (c.step < 0) {
    c.step = n;
    m << "first difference: the length (" << run.size() << " steps against the golden's " << golden.size() << ")";
  } else {
    m << "first difference: step " << c.step;
    if (!c.tensor.empty()) m << ", " << c.tensor << " (" << c.tensors_differing << " tensor(s) differ at that step)";
    if (!c.column.empty()) m << (c.tensor.empty() ? ", " : "; ") << "column " << c.column;
    if (c.tensor.empty() && !digests) m << " (no tensor digests to compare)";
  }
  c.message = m.str();
  return c;
}

uint64_t step_digest(const trajectory::StepDigests& d, int64_t step) {
  if (step < 0 || step >= static_cast<int64_t>(d.params.size())) return 0;
  return engine::combine_digests(d.params[step], engine::combine_digests(d.grads[step]));
}

namespace {
// one step's columns as compared bitwise (the step time never is): equal only if every bit is
bool same_row(const std::array<double, trajectory::kNumColumns>& a,
              const std::array<double, trajectory::kNumColumns>& b) {
  for (int c = 0; c < trajectory::kNumColumns; ++c)
    if (c != trajectory::kStepTimeMs && !same_bits(a[c], b[c])) return false;
  return true;
}
}  // namespace

Replay replay_step(engine::RunConfig cfg, const at::Device& device, int64_t step, const trajectory::Trajectory& run,
                   const trajectory::Trajectory& golden, int repeats, const std::string& scratch_dir,
                   const std::string& against) {
  Replay r;
  r.step = step;
  r.run_digest = step_digest(run.digests, step);
  r.golden_digest = step_digest(golden.digests, step);
  cfg.loop.digests = true;
  cfg.loop.log_every = 1;
  const std::string ckpt = scratch_dir + "/.replay-" + std::to_string(::getpid()) + ".ckpt";
  std::vector<std::array<double, trajectory::kNumColumns>> rows;  // one per replay: the step's columns
  try {
    engine::Trainer trainer(cfg, device);
    trainer.run_until(step);
    trainer.save_checkpoint(ckpt);
    for (int i = 0; i < repeats; ++i) {
      trainer.load_checkpoint(ckpt);
      trainer.train_step(step);
      trainer.flush();
      const auto& t = trainer.trajectory();
      r.digests.push_back(step_digest(t.digests, static_cast<int64_t>(t.digests.params.size()) - 1));
      rows.push_back(t.rows.back());
    }
  } catch (...) {
    std::remove(ckpt.c_str());
    throw;
  }
  std::remove(ckpt.c_str());
  std::ostringstream m;
  m << repeats << " replays of step " << step << " from a checkpoint: ";
  const bool have_rows = step < run.size() && step < golden.size();
  if (r.run_digest != r.golden_digest) {  // the tensors differ: the digests tell the replays apart
    const bool agree = std::all_of(r.digests.begin(), r.digests.end(), [&](uint64_t d) { return d == r.digests[0]; });
    if (!agree) {
      r.kind = ReplayKind::Transient;
      m << "they differ among themselves — a transient fault (the step does not compute the same twice)";
    } else if (r.digests[0] == r.golden_digest) {
      r.kind = ReplayKind::Transient;
      m << "each reproduces the " << against << "'s tensors (digest " << hex(r.golden_digest) << "), not the run's ("
        << hex(r.run_digest) << ") — a transient fault";
    } else {
      r.kind = ReplayKind::Persistent;
      m << "each reproduces " << (r.digests[0] == r.run_digest ? "the run's tensors" : "a third result") << " (digest "
        << hex(r.digests[0]) << "), not the " << against << "'s (" << hex(r.golden_digest)
        << ") — a persistent difference (software or hardware)";
    }
  } else if (have_rows) {  // the same tensors (digest r.run_digest); only a column differs: the rows tell them apart
    const auto& run_row = run.rows[step];
    const auto& golden_row = golden.rows[step];
    const bool agree = std::all_of(rows.begin(), rows.end(), [&](const auto& x) { return same_row(x, rows[0]); });
    m << "the step's tensors equal the " << against << "'s (digest " << hex(r.golden_digest) << "), a column differs; ";
    if (!agree) {
      r.kind = ReplayKind::Transient;
      m << "the replays' columns differ among themselves — a transient fault";
    } else if (same_row(rows[0], golden_row)) {
      r.kind = ReplayKind::Transient;
      m << "each replay's columns reproduce the " << against << "'s, not the run's — a transient fault";
    } else {
      r.kind = ReplayKind::Persistent;
      m << "each replay's columns reproduce " << (same_row(rows[0], run_row) ? "the run's" : "a third result")
        << ", not the " << against << "'s — a persistent difference (software or hardware)";
    }
  } else {
    r.kind = ReplayKind::Persistent;
    m << "the step is past the end of the run or the " << against << "; nothing to replay";
  }
  r.message = m.str();
  return r;
}

Plant parse_plant(const std::string& text) {
  Plant p;
  p.text = text;
  const std::string expected =
      "expected bitflip:<param|grad>:<parameter glob>:<element>:<bit>@<step>[:transient], tf32, nondeterministic, "
      "reduced-reduction or matmul-bf16";
  if (text == "tf32") p.stack.tf32 = true;
  else if (text == "nondeterministic")
    p.stack.nondeterministic = true;
  else if (text == "reduced-reduction")
    p.stack.reduced_reduction = true;
  else if (text == "matmul-bf16")
    p.stack.matmul_bf16 = true;
  else if (text.rfind("bitflip:", 0) == 0) {
    std::vector<std::string> parts;
    std::string rest = text.substr(8);
    const size_t at = rest.find('@');
    if (at == std::string::npos) throw std::invalid_argument("--plant '" + text + "': no @<step>; " + expected);
    std::string tail = rest.substr(at + 1);
    rest = rest.substr(0, at);
    for (size_t pos; (pos = rest.find(':')) != std::string::npos; rest.erase(0, pos + 1))
      parts.push_back(rest.substr(0, pos));
    parts.push_back(rest);
    if (const size_t colon = tail.find(':'); colon != std::string::npos) {
      if (tail.substr(colon + 1) != "transient")
        throw std::invalid_argument("--plant '" + text + "': after the step only ':transient' may follow; " + expected);
      p.transient = true;
      tail = tail.substr(0, colon);
    }
    if (parts.size() != 4 || (parts[0] != "param" && parts[0] != "grad") || parts[1].empty())
      throw std::invalid_argument("--plant '" + text + "': " + expected);
    inject::InjectionConfig inj;
    inj.kind = inject::InjectionKind::BitFlip;
    inj.flip_param = parts[0] == "param";
    inj.params = parts[1];
    // plain decimal digits only: no sign, no blank, no "0x" (std::stoll would take " 5", "+3" and "-0")
    auto number = [&](const std::string& field, const std::string& what) {
      if (field.empty() || field.size() > 18 ||
          !std::all_of(field.begin(), field.end(), [](unsigned char c) { return c >= '0' && c <= '9'; }))
        throw std::invalid_argument("--plant '" + text + "': the " + what + " '" + field +
                                    "' is not a non-negative decimal integer (digits only); " + expected);
      return std::stoll(field);
    };
    inj.element = number(parts[2], "element");
    inj.bit = number(parts[3], "bit");
    if (inj.bit > 63)
      throw std::invalid_argument("--plant '" + text + "': bit " + parts[3] + " is past any element (0-63); " +
                                  expected);
    inj.steps = {number(tail, "step")};
    p.injections.push_back(inj);
  } else {
    throw std::invalid_argument("--plant '" + text + "': unknown fault; " + expected);
  }
  if (p.transient && p.injections.empty())
    throw std::invalid_argument("--plant '" + text + "': only a bit flip can be transient");
  return p;
}

std::vector<ParameterShape> parameter_shapes(const engine::RunConfig& run) {
  models::ModelConfig mc = run.model;
  mc.seed = run.seed;
  const auto model = models::make_model(mc);  // on the CPU, in fp32: names and sizes are what the run's will be
  const int64_t bits = 8 * static_cast<int64_t>(c10::elementSize(run.strategy.param_dtype));
  std::vector<ParameterShape> out;
  for (const auto& p : model->parameters()) out.push_back({p.name, p.tensor.numel(), bits});
  return out;
}

void check_plant(const Plant& plant, const std::vector<ParameterShape>& params, int64_t steps) {
  for (const auto& inj : plant.injections) {
    const std::string what = inj.flip_param ? "value" : "gradient";
    auto first = std::find_if(params.begin(), params.end(),
                              [&](const ParameterShape& p) { return inject::glob_match(inj.params, p.name); });
    if (first == params.end()) {
      std::string names;
      for (size_t i = 0; i < params.size() && i < 8; ++i) names += (i ? ", " : "") + params[i].name;
      throw std::invalid_argument("--plant '" + plant.text + "': the glob '" + inj.params +
                                  "' matches no parameter of this scenario's model (expected a glob over its " +
                                  std::to_string(params.size()) + " parameters: " + names +
                                  (params.size() > 8 ? ", ..." : "") + ")");
    }
    if (inj.element >= first->numel)
      throw std::invalid_argument("--plant '" + plant.text + "': element " + std::to_string(inj.element) + " is past " +
                                  first->name + "'s " + what + " (expected 0 to " + std::to_string(first->numel - 1) +
                                  ": it has " + std::to_string(first->numel) + " elements)");
    if (inj.bit >= first->bits)
      throw std::invalid_argument("--plant '" + plant.text + "': bit " + std::to_string(inj.bit) + " is past " +
                                  first->name + "'s " + std::to_string(first->bits) + "-bit elements (expected 0 to " +
                                  std::to_string(first->bits - 1) + ")");
    for (int64_t s : inj.steps)
      if (s >= steps)
        throw std::invalid_argument("--plant '" + plant.text + "': step " + std::to_string(s) +
                                    " is past the run (expected 0 to " + std::to_string(steps - 1) + ": it trains " +
                                    std::to_string(steps) + " steps)");
  }
}

engine::RunConfig planted(engine::RunConfig cfg, const std::vector<Plant>& plants, bool replay) {
  for (const auto& p : plants) {
    if (replay && p.transient) continue;
    cfg.stack_fault.tf32 |= p.stack.tf32;
    cfg.stack_fault.nondeterministic |= p.stack.nondeterministic;
    cfg.stack_fault.reduced_reduction |= p.stack.reduced_reduction;
    cfg.stack_fault.matmul_bf16 |= p.stack.matmul_bf16;
    inject::add_injections(cfg, p.injections);
  }
  return cfg;
}

}  // namespace ampcheck::validate
