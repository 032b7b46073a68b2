// Reference keys and loading.
#include "reference/reference_store.h"

#include "io/fnv1a.h"

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace ampcheck::reference {

engine::RunConfig reference_run_config(const engine::RunConfig& run) {
  engine::RunConfig r = run;
  r.strategy = engine::strategy_preset("fp32");
  // planted events are what a reference has none of; a planted module fault (scale_weights) is part of the model
  r.faults = run.faults ? run.faults->kept_in_reference() : nullptr;
  r.model.keep_fp32.clear();  // (an FP32 run keeps everything in FP32 anyway)
  r.loop.clip_unscale_first = true;
  r.loop.call_update = true;
  r.loop.unscale_each_micro_batch = false;
  r.loop.divide_loss_by_micro_batches = true;  // these four are corrected, so absent from reference_key's text
  r.loop.step_through_scaler = true;
  r.loop.scale_loss = true;
  r.loop.zero_grad = true;
  r.loop.resume_at = 0;                         // the reference runs uninterrupted
  r.distributed = engine::DistributedConfig{};  // one process over the global batch: what N ranks must reproduce
  r.model.attention_query_dtype.clear();
  r.model.rmsnorm_fp32 = r.model.softmax_fp32 = r.model.logits_fp32 = true;  // llama's pitfall knobs, corrected
  r.model.rope_dtype = "fp32";
  r.model.head_loss =
      models::HeadLoss::Stock;  // engine options compute the same function: judged against the stock FP32 path
  r.model.head_chunk_rows = 0;
  r.model.fused_layernorm = false;
  r.model.fused_bias_gelu = false;
  r.model.gemm_epilogues = false;
  r.loop.cuda_graphs = false;  // the reference runs the stock, uncaptured engine
  r.optimizer.fused = false;   // the same kernel either way; without a scaler nothing differs
  r.loop.probe_every = 1;
  r.loop.log_every = 1;
  r.name = "reference:" + run.name;
  return r;
}

ReferenceKey reference_key(const engine::RunConfig& run) {
  const engine::RunConfig r = reference_run_config(run);
  const models::ModelConfig m = models::resolve_preset(r.model);
  std::ostringstream os;
  os << std::setprecision(17);
  os << "v1 seed=" << r.seed << " model=" << m.kind << "/" << m.preset << " L=" << m.n_layer << " H=" << m.n_head
     << " C=" << m.n_embd << " T=" << m.block_size << " V=" << m.vocab_size << " hidden=" << m.mlp_hidden
     << " dropout=" << m.dropout << " data=" << r.data.kind << " vocab=" << r.data.vocab_size
     << " tokens=" << r.data.corpus_tokens << " branching=" << r.data.branching << " dseed=" << r.data.seed
     << " B=" << r.data.batch_size << " seq=" << r.data.seq_len << " eval_fraction=" << r.data.eval_fraction;
  for (const auto& p : r.data.paths) os << " path=" << p;
  os << " opt=" << r.optimizer.kind << " lr=" << r.optimizer.lr << " betas=" << r.optimizer.beta1 << ","
     << r.optimizer.beta2 << " eps=" << r.optimizer.eps << " wd=" << r.optimizer.weight_decay
     << " momentum=" << r.optimizer.momentum << " schedule=" << r.schedule.kind << "/" << r.schedule.warmup_steps << "/"
     << r.schedule.min_lr_ratio << " steps=" << r.loop.steps << " micro=" << r.loop.micro_batches
     << " clip=" << r.loop.clip_max_norm << " eval=" << r.loop.eval_every << "x" << r.loop.eval_batches;
  if (r.loop.two_optimizers) os << " two_optimizers aux=" << r.loop.aux_loss_weight;  // (absent from older keys)
  if (m.kind == "llama")  // the architecture's own fields (absent from the other kinds' keys)
    os << " kv=" << m.n_kv_head << " theta=" << m.rope_theta << " tied=" << m.tie_embeddings
       << " eps=" << m.rms_norm_eps << " attn=" << (m.sdpa ? "sdpa" : "eager") << " outliers=" << m.outlier_channels
       << "x" << m.outlier_scale;
  if (r.faults) os << r.faults->reference_key_text();  // planted module faults (absent from older keys)
  ReferenceKey k;
  k.canonical = os.str();
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << io::fnv1a(k.canonical);
  k.key = m.kind + "-" + m.preset + "-" + hex.str();
  return k;
}

std::string reference_path(const std::string& root, const std::string& device_class, const std::string& key) {
  return root + "/" + device_class + "/" + key + ".h5";
}

std::vector<NoisePerturbation> noise_perturbations(bool more) {
  // ulp nudges: how fast this model and optimizer amplify a rounding-sized difference; seed and order: how far an
  // equally valid FP32 training (other initial weights, other batch order) lies from the reference; skip: how far a
  // one-step delay (the first step skipped, as a GradScaler skips an overflowing step) moves it.
  std::vector<NoisePerturbation> out = {{"ulp+1", 1.0, 0, 0},
                                        {"ulp-1", -1.0, 0, 0},
                                        {"seed", 0.0, 1, 0},
                                        {"order", 0.0, 0, 0x0dde5eedULL},
                                        {"skip", 0.0, 0, 0, 1}};
  if (more) out.insert(out.end(), {{"seed-2", 0.0, 2, 0}, {"order-2", 0.0, 0, 0x5eed0dd2ULL}});
  return out;
}

engine::RunConfig perturbed(const engine::RunConfig& reference_run, const NoisePerturbation& p) {
  engine::RunConfig r = reference_run;
  r.model.init_perturb_ulps = p.init_ulps;
  r.seed += p.seed_offset;
  if (p.order_seed != 0) r.data.order_seed = r.data.seed ^ p.order_seed;
  r.loop.delay_steps = p.delay_steps;
  r.name = reference_run.name + "~" + p.label;
  return r;
}

Reference load_reference(const std::string& root, const std::string& device_class, const engine::RunConfig& run,
                         const std::string& suite_hint) {
  const ReferenceKey key = reference_key(run);
  Reference ref;
  ref.path = reference_path(root, device_class, key.key);
  const std::string hint = ". HINT: run `ampcheck record" +
                           (suite_hint.empty() ? std::string() : " --suite " + suite_hint) +
                           "` on this device class (" + device_class + ") to record it";
  struct stat st;
  if (::stat(ref.path.c_str(), &st) != 0)
    throw std::runtime_error("no FP32 reference for '" + run.name + "': " + ref.path + " does not exist" + hint);
  try {
    ref.file =
        trajectory::read_trajectory_contained(ref.path);  // a reference root may come from outside (--references)
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) + hint);
  }
  const auto& canonical = ref.file.attributes.reference_canonical;
  if (!canonical || *canonical != key.canonical)
    throw std::runtime_error(ref.path + ": stale reference — it was recorded for\n  " + canonical.value_or("(no key)") +
                             "\nbut '" + run.name + "' now needs\n  " + key.canonical + hint + " --force");
  auto sp = ref.file.series.find("loss_spread");
  if (sp == ref.file.series.end() || sp->second.size() != ref.file.trajectory.rows.size())
    throw std::runtime_error(ref.path + ": reference has no loss_spread series of its length" + hint + " --force");
  ref.loss_spread = sp->second;
  ref.noise = ref.file.noise_runs;
  if (ref.noise.empty())
    throw std::runtime_error(ref.path +
                             ": reference has no noise runs (recorded by an ampcheck before verdicts read "
                             "measured noise)" +
                             hint + " --force");
  for (const auto& nr : ref.noise)
    if (nr.trajectory.rows.size() != ref.file.trajectory.rows.size())
      throw std::runtime_error(ref.path + ": noise run '" + nr.label + "' has " + std::to_string(nr.trajectory.size()) +
                               " steps, the reference " + std::to_string(ref.file.trajectory.size()) + hint +
                               " --force");
  if (ref.file.trajectory.size() != run.loop.steps)
    throw std::runtime_error(ref.path + ": reference has " + std::to_string(ref.file.trajectory.size()) +
                             " steps, the scenario " + std::to_string(run.loop.steps) + hint + " --force");
  return ref;
}

std::vector<double> loss_spread(const trajectory::Trajectory& reference,
                                const std::vector<trajectory::LabelledTrajectory>& noise_runs) {
  std::vector<double> spread(reference.rows.size(), 0.0);
  for (const auto& n : noise_runs)
    for (size_t s = 0; s < spread.size(); ++s)
      spread[s] =
          std::max(spread[s], std::abs(n.trajectory.rows[s][trajectory::kLoss] - reference.rows[s][trajectory::kLoss]));
  return spread;
}

}  // namespace ampcheck::reference
