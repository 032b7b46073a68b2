// Trainer construction (trainer.h): the model with the engine plan's fields, the data, the optimizer groups and the
// loss scaler. The step and the run are trainer.cpp's.
#include "engine/trainer.h"

#include <cstdlib>
#include <string>

namespace ampcheck::engine {

// The model: built in fp32 on the CPU from the seed with the plan's engine fields, then cast / moved (the strategy's
// `.half()` happens here); the strategy's FP8 matmuls replace its Linear layers at the chosen sites.
void Trainer::build_model() {
  models::ModelConfig mc = plan_.model;
  mc.seed = cfg_.seed;
  model_ = models::make_model(mc);
  if (faults_) faults_->at_init(model_->parameters(), trajectory_.events);  // planted module faults (scale_weights)
  model_->to(device_, cfg_.strategy.param_dtype);
  // the first non-finite module (RunOutcome): a captured step replays without the host, so it watches nothing.
  // AMPCHECK_NONFINITE_WATCH=0 turns it off (to measure what it costs: docs/PERFORMANCE.md).
  const char* watch = std::getenv("AMPCHECK_NONFINITE_WATCH");
  model_->set_nonfinite_watch(!plan_.cuda_graphs && !(watch && std::string(watch) == "0"));
  precision_ = make_precision_runtime(cfg_.strategy, *model_, device_);
}

// The data: vocabulary and sequence length default to the model's (the scenario parser has checked that they fit it).
void Trainer::build_data() {
  const models::ModelConfig mc = models::resolve_preset(plan_.model);
  data::DataConfig& dc = cfg_.data;
  if (dc.vocab_size == 0) dc.vocab_size = mc.vocab_size;
  if (dc.seq_len == 0) dc.seq_len = mc.block_size;
  TORCH_CHECK(dc.vocab_size <= mc.vocab_size && dc.seq_len <= mc.block_size, "data.vocab_size ", dc.vocab_size,
              " / data.seq_len ", dc.seq_len, " exceed the model's vocab ", mc.vocab_size, " / block_size ",
              mc.block_size);
  const data::TokenCorpus corpus =
      dc.kind == "shards" ? data::TokenCorpus::from_shards(dc.paths, mc.vocab_size)
                          : data::TokenCorpus::synthetic(dc.vocab_size, dc.corpus_tokens, dc.branching, dc.seed);
  sampler_ = std::make_unique<data::BatchSampler>(corpus, dc, device_);
  if (grad_sync_) sampler_->set_shard(grad_sync_->rank(), grad_sync_->world_size());
}

// The optimizer(s) over the model's parameters, or over fp32 master copies of them; two groups with
// loop.two_optimizers (the blocks, gpt "h.*" / llama "model.layers.*", and the rest); a ZeRO-1 rank steps only the
// parameters it owns. AdamW sums the squares the plan takes from its pass.
void Trainer::build_optimizers() {
  if (cfg_.strategy.master_weights) masters_ = MasterWeights(model_->parameters());
  std::vector<at::Tensor> opt_params[2];
  std::vector<bool> decay[2];
  const auto& ps = model_->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const int group = (cfg_.loop.two_optimizers && !models::in_block(ps[i].name)) ? 1 : 0;
    if (group == 1) second_group_.push_back(i);
    if (grad_sync_ && !grad_sync_->owns_parameter(i)) continue;  // ZeRO-1: another rank steps it
    opt_params[group].push_back(masters_.empty() ? ps[i].tensor : masters_[i]);
    decay[group].push_back(ps[i].decay);
  }
  OptimizerConfig opt_cfg = cfg_.optimizer;
  opt_cfg.sum_param_squares = plan_.param_norm_from_optimizer;
  opt_cfg.sum_grad_squares = plan_.grad_norm_from_optimizer;
  for (int g = 0; g < 2; ++g)
    if (!opt_params[g].empty()) optimizers_.push_back(make_optimizer(opt_params[g], decay[g], opt_cfg));
  TORCH_INTERNAL_ASSERT(!plan_.param_norm_from_optimizer || optimizers_[0]->sums_squares(),
                        "engine plan: train.fused_param_norm applied where AdamW cannot sum the parameters");
}

// Loss scaler: dynamic = PyTorch's GradScaler; static = the same scaler with the scale pinned by update(S); none.
std::unique_ptr<amp::GradScaler> Trainer::make_scaler() const {
  const ScalerConfig& sc = cfg_.strategy.scaler;
  if (sc.kind == ScalerKind::None) return nullptr;
  amp::GradScalerOptions o;
  o.init_scale = sc.init_scale;
  o.growth_factor = sc.growth_factor;
  o.backoff_factor = sc.backoff_factor;
  o.growth_interval = sc.growth_interval;
  auto scaler = std::make_unique<amp::GradScaler>(device_.type(), o);
  if (grad_sync_) scaler->set_found_inf_reducer(grad_sync_->found_inf_reducer());
  return scaler;
}

}  // namespace ampcheck::engine
