// Trainer implementation. Comments mark every host-device SYNC POINT; the hot path has none except the
// trajectory flush (every loop.log_every steps) and GradScaler's own skip decision on the non-fused path.
#include "engine/trainer.h"

#include <algorithm>

#include "engine/checkpoint.h"
#include "engine/device.h"
#include "kernels/fused.h"

#include <ampcheck/amp/autocast.h>

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <optional>
#include <cstdio>
#include <stdexcept>
#include <unistd.h>

namespace ampcheck::engine {

const char* status_name(RunOutcome::Status s) {
  switch (s) {
    case RunOutcome::Status::Completed: return "completed";
    case RunOutcome::Status::NonFinite: return "nonfinite";
    case RunOutcome::Status::Error: return "error";
  }
  return "?";
}

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double smallest_normal(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 6.103515625e-05;              // 2^-14
    case at::kBFloat16: return 1.1754943508222875e-38;   // 2^-126, as fp32
    case at::kDouble: return 2.2250738585072014e-308;
    default: return 1.1754943508222875e-38;              // fp32
  }
}

double largest_finite(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 65504.0;
    case at::kBFloat16: return 3.3895313892515355e+38;
    case at::kDouble: return 1.7976931348623157e+308;
    default: return 3.4028234663852886e+38;  // fp32
  }
}

at::Tensor total_norm(const std::vector<at::Tensor>& ts, const at::Device& device) {
  if (ts.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  // per-tensor norms accumulated in fp32 whatever the tensor dtype (fp16 norms of scaled grads would overflow)
  std::vector<at::Tensor> norms = at::_foreach_norm(ts, 2, at::kFloat);
  return at::linalg_vector_norm(at::stack(norms), 2);
}

// engine option train.fused_grad_check: the norm from one pass that also says whether any element is inf or NaN
std::pair<at::Tensor, at::Tensor> norm_and_found(const std::vector<at::Tensor>& ts, const at::Device& device) {
  if (ts.empty()) {
    at::Tensor zero = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    return {zero, zero.clone()};
  }
  auto [sum_sq, found] = kernels::square_sum_nonfinite(ts);
  return {sum_sq.sqrt(), found};
}
}  // namespace

Trainer::Trainer(RunConfig cfg, at::Device device, GradientSync* sync)
    : cfg_(std::move(cfg)), device_(device), injector_(cfg_.injections), grad_sync_(sync), timer_(device) {
  if (grad_sync_) {  // planted events of other ranks are not this rank's
    std::vector<inject::InjectionConfig> mine;
    for (const auto& inj : cfg_.injections)
      if (inj.rank < 0 || inj.rank == grad_sync_->rank()) mine.push_back(inj);
    injector_ = inject::Injector(mine);
  }
  check_supported(cfg_.strategy, device_);
  numerics_ = std::make_unique<NumericsGuard>(cfg_.strategy);

  // model: built in fp32 on the CPU from the seed, then cast / moved (the strategy's `.half()` happens here)
  models::ModelConfig mc = cfg_.model;
  mc.seed = cfg_.seed;
  model_ = models::make_model(mc);
  mc = models::resolve_preset(mc);
  model_->to(device_, cfg_.strategy.param_dtype);
  if (cfg_.strategy.fp8) {  // the strategy's FP8 matmuls replace the model's Linear layers at the chosen sites
    fp8_ = std::make_unique<Fp8Matmuls>(*cfg_.strategy.fp8, model_->matmul_sites(), device_);
    model_->set_matmul_override(fp8_.get());
  }

  // data
  data::DataConfig dc = cfg_.data;
  if (dc.vocab_size == 0) dc.vocab_size = mc.vocab_size;
  if (dc.seq_len == 0) dc.seq_len = mc.block_size;
  if (dc.vocab_size > mc.vocab_size)
    throw std::invalid_argument("data.vocab_size (" + std::to_string(dc.vocab_size) + ") exceeds the model's vocab (" +
                                std::to_string(mc.vocab_size) + ")");
  if (dc.seq_len > mc.block_size)
    throw std::invalid_argument("data.seq_len (" + std::to_string(dc.seq_len) + ") exceeds the model's block_size (" +
                                std::to_string(mc.block_size) + ")");
  cfg_.data = dc;
  const data::TokenCorpus corpus = dc.kind == "shards"
                                       ? data::TokenCorpus::from_shards(dc.paths, mc.vocab_size)
                                       : data::TokenCorpus::synthetic(dc.vocab_size, dc.corpus_tokens, dc.branching, dc.seed);
  sampler_ = std::make_unique<data::BatchSampler>(corpus, dc, device_);
  if (grad_sync_) sampler_->set_shard(grad_sync_->rank(), grad_sync_->world_size());

  // optimizer(s) over the model's params, or over fp32 master copies of them
  std::vector<at::Tensor> opt_params[2];
  std::vector<bool> decay[2];
  const auto& ps = model_->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    at::Tensor target = ps[i].tensor;
    if (cfg_.strategy.master_weights) {
      at::Tensor m = ps[i].tensor.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      masters_.push_back(m.requires_grad_(true));
      target = masters_.back();
    }
    const int group = (cfg_.loop.two_optimizers && ps[i].name.rfind("h.", 0) != 0) ? 1 : 0;
    if (group == 1) second_group_.push_back(i);
    if (grad_sync_ && !grad_sync_->owns_parameter(i)) continue;  // ZeRO-1: another rank steps it
    opt_params[group].push_back(target);
    decay[group].push_back(ps[i].decay);
  }
  // engine option train.fused_param_norm: where one AdamW steps every model parameter itself, its pass sums their squares
  param_norm_from_optimizer_ = cfg_.loop.fused_param_norm && cfg_.optimizer.kind == "adamw" && masters_.empty() &&
                               !grad_sync_ && second_group_.empty();
  // and, where no GradScaler scales the grads and nothing clips them, the gradient norm from the same read of the grads
  grad_norm_from_optimizer_ = param_norm_from_optimizer_ && cfg_.strategy.scaler.kind == ScalerKind::None &&
                              cfg_.loop.clip_max_norm <= 0;
  OptimizerConfig opt_cfg = cfg_.optimizer;
  opt_cfg.sum_param_squares = param_norm_from_optimizer_;
  opt_cfg.sum_grad_squares = grad_norm_from_optimizer_;
  for (int g = 0; g < 2; ++g)
    if (!opt_params[g].empty()) optimizers_.push_back(make_optimizer(opt_params[g], decay[g], opt_cfg));
  // ... where that AdamW can sum these parameters (fp32, contiguous, one device: not model.half() or model.to(bf16))
  if (param_norm_from_optimizer_ && !optimizers_[0]->sums_squares())
    param_norm_from_optimizer_ = grad_norm_from_optimizer_ = false;

  scaler_ = make_scaler();

  if (cfg_.loop.cuda_graphs) {  // engine option: capture the step where nothing in it needs the host
    graphs_uncaptured_ = StepGraphs::why_not(cfg_, device_, grad_sync_ != nullptr);
    if (graphs_uncaptured_.empty()) {
      graphs_ = std::make_unique<StepGraphs>();
      for (auto& opt : optimizers_) opt->keep_lr_on_device(device_);
    }
  }
}

Trainer::~Trainer() = default;

std::string Trainer::cuda_graphs_status() const {
  if (!cfg_.loop.cuda_graphs) return "";
  if (!graphs_) return "uncaptured: " + graphs_uncaptured_;
  return "captured: " + std::to_string(graphs_->graphs()) + " graph(s), " + std::to_string(graphs_->replays()) +
         " of " + std::to_string(next_step_) + " steps replayed";
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

std::vector<at::Tensor> Trainer::model_grads() const {
  std::vector<at::Tensor> gs;
  for (const auto& p : model_->parameters())
    if (p.tensor.grad().defined()) gs.push_back(p.tensor.grad());
  return gs;
}

// ---------------------------------------------------------------------------------------------------------------
// phases

at::Tensor Trainer::forward_backward(int64_t step, const std::vector<data::Batch>& batches) {
  const int64_t M = cfg_.loop.micro_batches;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  for (int64_t micro = 0; micro < M; ++micro) {
    const data::Batch& batch = batches[static_cast<size_t>(micro)];
    std::vector<std::string> scratch;
    models::ForwardOptions fwd = injector_.forward_options(step, micro == 0 ? trajectory_.events : scratch);
    if (cfg_.model.head_loss == "fused") fwd.loss_grad_scale = loss_grad_scale(step);  // (only it reads the hint)
    at::Tensor loss;
    {  // forward, under the strategy's autocast (backward runs outside it, as PyTorch recommends)
      std::optional<amp::AutocastGuard> autocast;
      if (cfg_.strategy.autocast) autocast.emplace(device_.type(), *cfg_.strategy.autocast);
      loss = model_->loss(batch.inputs, batch.targets, fwd);
    }
    // the recorded loss is the true mean; backward gets loss / M (PITFALL divide_loss_by_micro_batches: false: loss)
    const at::Tensor mean_part = M > 1 ? loss / static_cast<double>(M) : loss;
    loss_sum += mean_part.detach().to(at::kFloat);
    if (cfg_.loop.divide_loss_by_micro_batches) loss = mean_part;
    loss = injector_.on_loss(loss, step, micro == 0 ? trajectory_.events : scratch);
    // backward
    backward_target(loss).backward();
    if (cfg_.loop.aux_loss_weight != 0) {  // the second loss, its own (scaled) backward
      at::Tensor aux = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
      for (size_t i : second_group_) aux = aux + model_->parameters()[i].tensor.to(at::kFloat).pow(2).sum();
      const at::Tensor aux_mean = aux * (cfg_.loop.aux_loss_weight / static_cast<double>(M));
      loss_sum += aux_mean.detach();
      aux = cfg_.loop.divide_loss_by_micro_batches ? aux_mean : aux * cfg_.loop.aux_loss_weight;
      backward_target(aux).backward();
    }
    if (scaler_ && cfg_.loop.unscale_each_micro_batch)
      for (auto& opt : optimizers_) scaler_->unscale_(*opt);  // PITFALL when M > 1
  }
  injector_.after_backward(model_->parameters(), step);
  return loss_sum;
}

// What backward() will bring to the model's loss, as the fused LM head needs to know in its forward: the loss scale
// when the loss goes through scaler.scale (the value scale() is about to create on the first step), times a planted
// loss-scale event's factor, divided by the micro-batches where the loss is; undefined = 1.
at::Tensor Trainer::loss_grad_scale(int64_t step) const {
  const int64_t M = cfg_.loop.micro_batches;
  const double k = injector_.loss_factor(step) * (M > 1 && cfg_.loop.divide_loss_by_micro_batches ? 1.0 / M : 1.0);
  at::Tensor scale;
  if (scaler_ && scaler_->is_enabled() && cfg_.loop.scale_loss)
    scale = scaler_->scale_tensor().defined()
                ? scaler_->scale_tensor()
                : at::full({}, scaler_->get_scale(), at::TensorOptions().dtype(at::kFloat).device(device_));
  if (k == 1.0) return scale;
  return scale.defined() ? scale * k : at::full({}, k, at::TensorOptions().dtype(at::kFloat).device(device_));
}

// What backward() runs on: scaler.scale(loss), or the loss itself without a scaler. PITFALL scale_loss: false is
// `scaler.scale(loss); loss.backward()`: scale() runs (creating the scale, as in PyTorch) and its result is dropped.
at::Tensor Trainer::backward_target(const at::Tensor& loss) {
  if (!scaler_) return loss;
  at::Tensor scaled = scaler_->scale(loss);
  return cfg_.loop.scale_loss ? scaled : loss;
}

// step: scaler.step(opt) per optimizer, each stepped or skipped on its own grads' inf check; or opt.step() — without
// a scaler, or PITFALL step_through_scaler: false (scaled grads applied, nothing skipped). Returns the skipped flag
// (0-dim float on the device): 1 if any optimizer was skipped.
at::Tensor Trainer::optimizer_step() {
  const auto dev_opts = at::TensorOptions().dtype(at::kFloat).device(device_);
  at::Tensor skipped = at::zeros({}, dev_opts);
  if (!scaler_ || !cfg_.loop.step_through_scaler) {
    for (auto& opt : optimizers_) opt->step();
    return skipped;
  }
  for (auto& opt : optimizers_) {
    const bool stepped = scaler_->step(*opt);  // SYNC POINT inside on the non-fused path (skip decision)
    at::Tensor s = opt->supports_amp_scaling() ? (scaler_->found_inf(*opt) > 0).to(at::kFloat)
                                               : at::full({}, stepped ? 0.0 : 1.0, dev_opts);
    skipped = at::maximum(skipped, s);
  }
  return skipped;
}

// update: a static scale is pinned by update(S); a dynamic one follows update() (never, PITFALL call_update: false).
// update() without any inf check recorded since the last one (step_through_scaler: false) raises, as PyTorch does.
void Trainer::update_scale() {
  if (!scaler_) return;
  if (cfg_.strategy.scaler.kind == ScalerKind::Static) scaler_->update(cfg_.strategy.scaler.init_scale);
  else if (cfg_.loop.call_update) scaler_->update();
}

// train.fused_grad_check: whether the probe's pass over the model's grads can stand for the GradScaler's inf check —
// it read exactly the grads the scaler would check, as step() would see them: one optimizer holding every parameter
// (no master copies, no ZeRO shard, no second group) on the fused path, nothing between the probe and the step that
// changes them (no clipping), stepped through the scaler, and no check recorded yet this step (unscale_ inside the
// accumulation loop, a pitfall, has made its own). Without a scale (scale() never called) the scaler's own step()
// raises PyTorch's error.
bool Trainer::inf_check_from_probe() const {
  return scaler_ && scaler_->is_enabled() && scaler_->scale_tensor().defined() && optimizers_.size() == 1 && optimizers_[0]->supports_amp_scaling() &&
         masters_.empty() && !grad_sync_ && cfg_.loop.clip_max_norm <= 0 && cfg_.loop.step_through_scaler &&
         scaler_->stage(*optimizers_[0]) == amp::GradScaler::Stage::READY;
}

std::vector<at::Tensor> Trainer::stepped_parameters() const {
  if (masters_.empty()) return model_->parameter_tensors();
  std::vector<at::Tensor> out;
  for (const auto& m : masters_) out.push_back(m.detach());
  return out;
}

void Trainer::master_grads() {
  if (masters_.empty()) return;
  at::NoGradGuard no_grad;
  const auto& ps = model_->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const at::Tensor& g = ps[i].tensor.grad();
    masters_[i].mutable_grad() = g.defined() ? g.to(at::kFloat) : at::Tensor();
  }
}

void Trainer::master_copy_back() {
  if (masters_.empty()) return;
  at::NoGradGuard no_grad;
  auto& ps = model_->parameters();
  for (size_t i = 0; i < ps.size(); ++i) ps[i].tensor.copy_(masters_[i]);
}

std::vector<at::Tensor> Trainer::grad_stats(const std::vector<at::Tensor>& grads) const {
  auto opts = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor zero = at::zeros({}, opts), sub = at::zeros({}, opts), nonfinite = at::zeros({}, opts);
  int64_t numel = 0;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& g : grads) {
    by_dtype[g.scalar_type()].push_back(g.reshape({-1}));
    numel += g.numel();
  }
  for (auto& [dtype, flats] : by_dtype) {
    // one |g| tensor, three compare-and-count passes: NaN fails every comparison and inf exceeds the max, so
    // non-finite = n - count(|g| <= max). Few kernel launches whatever the number of parameters.
    at::Tensor mag = (flats.size() == 1 ? flats[0] : at::cat(flats)).abs();
    at::Tensor n_zero = (mag == 0).sum();
    zero += n_zero;
    sub += (mag < smallest_normal(dtype)).sum() - n_zero;
    nonfinite += static_cast<double>(mag.numel()) - (mag <= largest_finite(dtype)).sum();
  }
  const double n = std::max<int64_t>(numel, 1);
  return {zero / n, sub / n, nonfinite / n};
}

// ---------------------------------------------------------------------------------------------------------------
// one optimizer step

void Trainer::train_step(int64_t step) {
  timer_.start();
  const double lr = scheduled_lr(cfg_.schedule, cfg_.optimizer.lr, step, cfg_.loop.steps);
  for (auto& opt : optimizers_) opt->set_lr(lr);
  const bool full_probe = cfg_.loop.probe_every > 0 && step % cfg_.loop.probe_every == 0;
  std::vector<data::Batch> batches;
  for (int64_t micro = 0; micro < cfg_.loop.micro_batches; ++micro) batches.push_back(sampler_->train_batch(step, micro));

  // the device work: run directly, or captured once per kind of step and replayed (engine option train.cuda_graphs)
  pending_rows_.push_back(graphs_ ? step_through_graph(step, full_probe, batches)
                                  : step_on_device(step, full_probe, batches));
  std::array<double, kNumColumns> host{};
  host.fill(kNaN);
  host[kLr] = lr;
  pending_host_.push_back(host);
  next_step_ = step + 1;
  timer_.stop();

  if (static_cast<int64_t>(pending_rows_.size()) >= cfg_.loop.log_every) flush();
  if (cfg_.loop.eval_every > 0 && next_step_ % cfg_.loop.eval_every == 0) {
    flush();
    trajectory_.rows.back()[kEvalLoss] = evaluate();
  }
}

// train.cuda_graphs: the batches copied into static buffers, the step's graph replayed (StepGraphs captures it the
// first time), its row read from a static tensor.
at::Tensor Trainer::step_through_graph(int64_t step, bool full_probe, const std::vector<data::Batch>& batches) {
  if (static_batches_.empty())
    for (const auto& b : batches) static_batches_.push_back({b.inputs.clone(), b.targets.clone()});
  for (size_t m = 0; m < batches.size(); ++m) {
    static_batches_[m].inputs.copy_(batches[m].inputs, /*non_blocking=*/true);
    static_batches_[m].targets.copy_(batches[m].targets, /*non_blocking=*/true);
  }
  const int kind = full_probe ? 1 : 0;
  at::Tensor& out = static_rows_[kind];
  if (!out.defined()) out = at::empty({kNumDeviceColumns}, at::TensorOptions().dtype(at::kDouble).device(device_));
  graphs_->run(kind, [&] { out.copy_(step_on_device(step, full_probe, static_batches_)); });
  return out.clone();
}

// The step's device work, phase by phase; returns its trajectory row ((kNumDeviceColumns,) fp64 on the device).
// No host sync on the captured paths (StepGraphs::why_not lists the configurations that need one).
at::Tensor Trainer::step_on_device(int64_t step, bool full_probe, const std::vector<data::Batch>& batches) {
  if (cfg_.loop.zero_grad) {  // PITFALL zero_grad: false: backward adds this step's grads to the last step's
    for (auto& opt : optimizers_) opt->zero_grad();
    // the model's grads too where the optimizers do not hold every model parameter (masters, a ZeRO-1 shard)
    if (!masters_.empty() || grad_sync_)
      for (auto& p : model_->parameters()) p.tensor.mutable_grad() = at::Tensor();
  }

  // forward + backward over the micro-batches
  if (fp8_) fp8_->begin_step(full_probe);
  at::Tensor loss = forward_backward(step, batches);
  if (fp8_) fp8_->end_step();

  // planted gradient events (what this rank's backward produced)
  injector_.on_grads(model_->parameters(), step, trajectory_.events);

  // data-parallel all-reduce point (none in a single process)
  if (grad_sync_) grad_sync_->all_reduce(model_grads());

  // probe: gradient as backward produced it (scaled), true norm = scaled norm / scale
  const auto dev_opts = at::TensorOptions().dtype(at::kFloat).device(device_);
  const std::vector<at::Tensor> grads = model_grads();
  at::Tensor scale_used = (scaler_ && scaler_->scale_tensor().defined()) ? scaler_->scale_tensor().clone()
                                                                         : at::ones({}, dev_opts);
  at::Tensor grad_norm;
  if (grad_norm_from_optimizer_) {
    // train.fused_param_norm, no scaler, no clipping: AdamW's pass reads these very grads; the norm after the step
  } else if (cfg_.loop.fused_grad_check) {  // engine option: the same pass is the GradScaler's inf check where it can be
    auto [norm, found] = norm_and_found(grads, device_);
    grad_norm = norm / scale_used;
    if (inf_check_from_probe()) scaler_->record_inf_check(*optimizers_[0], found);
  } else {
    grad_norm = total_norm(grads, device_) / scale_used;
  }
  std::vector<at::Tensor> stats;
  if (full_probe) {
    stats = grad_stats(grads);
    at::NoGradGuard no_grad;
    const auto params = stepped_parameters();
    if (prev_params_.empty()) {
      for (const auto& p : params) prev_params_.push_back(p.detach().clone());
    } else {
      at::_foreach_copy_(prev_params_, params);
    }
  }  // (not probed: NaN in the row below)

  // fp16/bf16 model grads -> fp32 master grads
  master_grads();

  // unscale + clip
  std::vector<at::Tensor> opt_grads;
  if (cfg_.loop.clip_max_norm > 0) {
    for (auto& opt : optimizers_) {
      if (scaler_ && cfg_.loop.clip_unscale_first) scaler_->unscale_(*opt);
      for (const auto& p : opt->params()) opt_grads.push_back(p.grad());
    }
    clip_grad_norm_(opt_grads, cfg_.loop.clip_max_norm);  // one norm over every parameter, as PyTorch's recipe
  }

  // step + update
  const at::Tensor skipped = optimizer_step();
  update_scale();
  master_copy_back();
  if (grad_norm_from_optimizer_) {  // (the grads as they were: nothing unscales them without a scaler)
    const at::Tensor gsq = optimizers_[0]->grad_square_sum();
    TORCH_INTERNAL_ASSERT(gsq.defined(), "train.fused_param_norm: AdamW's step left no gradient sum");
    grad_norm = gsq.sqrt() / scale_used;
  }

  // data parallel: a sharded optimizer's parameters gathered, ranks compared, the loss averaged over the ranks
  if (grad_sync_) {
    at::Tensor scale_now = scaler_ && scaler_->scale_tensor().defined() ? scaler_->scale_tensor() : at::ones({}, dev_opts);
    loss = grad_sync_->after_step(step, model_->parameter_tensors(), loss, scale_now, skipped);
  }

  // probe: parameters after the step
  at::Tensor param_norm, update_norm;
  const at::Tensor nan = full_probe ? at::Tensor() : at::full({}, kNaN, dev_opts);  // the columns not probed
  {
    at::NoGradGuard no_grad;
    const auto params = stepped_parameters();
    const at::Tensor sq = param_norm_from_optimizer_ ? optimizers_[0]->param_square_sum() : at::Tensor();
    // train.fused_param_norm: AdamW's pass (bit for bit norm_and_found's); undefined where no step has summed these
    // parameters yet (a first step the GradScaler skipped on the host; the first after a checkpoint load): the pass
    if (sq.defined()) param_norm = sq.sqrt();
    else param_norm = cfg_.loop.fused_grad_check ? norm_and_found(params, device_).first : total_norm(params, device_);
    update_norm = full_probe ? total_norm(at::_foreach_sub(params, prev_params_), device_) : nan;
  }

  // the row in fp64: loss and norms as computed, the scale, the skip flag and the statistics rounded to fp32 first (as
  // the row always held them). Where every column is fp32 (always, so far) one stack and one exact widening — a few
  // kernels rather than a conversion per column.
  std::vector<at::Tensor> row = {loss, grad_norm, param_norm, update_norm, scale_used, skipped};
  for (const auto& s : stats) row.push_back(s);
  while (static_cast<int>(row.size()) < kNumDeviceColumns) row.push_back(nan);
  bool all_fp32 = true;
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = (static_cast<int>(i) < kLossScale ? row[i] : row[i].to(at::kFloat)).reshape({});
    all_fp32 = all_fp32 && row[i].scalar_type() == at::kFloat;
  }
  if (all_fp32) return at::stack(row).to(at::kDouble);
  for (auto& t : row) t = t.to(at::kDouble);
  return at::stack(row);
}

void Trainer::flush() {
  if (pending_rows_.empty()) return;
  // SYNC POINT: one device->host copy of the pending rows; the steps' timing events have completed after it.
  at::Tensor rows = at::stack(pending_rows_).to(at::kCPU);
  synchronize(device_);
  const std::vector<double> ms = timer_.collect();
  auto acc = rows.accessor<double, 2>();
  for (size_t i = 0; i < pending_rows_.size(); ++i) {
    auto host = pending_host_[i];
    for (int c = 0; c < kNumDeviceColumns; ++c) host[c] = acc[i][c];
    host[kStepTimeMs] = i < ms.size() ? ms[i] : kNaN;
    trajectory_.rows.push_back(host);
  }
  pending_rows_.clear();
  pending_host_.clear();
  if (fp8_) fp8_->flush_into(trajectory_.fp8);
  if (progress_) progress_(trajectory_.size() - 1, trajectory_);
}

double Trainer::evaluate() {
  at::NoGradGuard no_grad;
  std::optional<amp::AutocastGuard> autocast;
  if (cfg_.strategy.autocast) autocast.emplace(device_.type(), *cfg_.strategy.autocast);
  at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (int64_t i = 0; i < cfg_.loop.eval_batches; ++i) {
    const data::Batch b = sampler_->eval_batch(i);
    sum += model_->loss(b.inputs, b.targets).to(at::kDouble);
  }
  return sum.item<double>() / static_cast<double>(cfg_.loop.eval_batches);  // SYNC POINT
}

// ---------------------------------------------------------------------------------------------------------------
// runs

void Trainer::run_until(int64_t until) {
  while (next_step_ < until) train_step(next_step_);
  flush();
}

// A step raised: the run ends with the error; the failed step's partial row and timing are dropped.
void Trainer::raised(RunOutcome& out, const std::string& error) {
  out.status = RunOutcome::Status::Error;
  out.error = error;
  out.failed_step = next_step_;
  pending_rows_.clear();
  pending_host_.clear();
  if (fp8_) fp8_->discard();
  timer_.discard();
}

RunOutcome Trainer::run() {
  RunOutcome out;
  const int64_t flush_every = std::max<int64_t>(1, cfg_.loop.log_every);
  try {
    while (next_step_ < cfg_.loop.steps) {
      if (cfg_.loop.resume_at > 0 && next_step_ == cfg_.loop.resume_at) {
        flush();
        bool restore = cfg_.loop.resume_restore_scaler;
        const auto& only = cfg_.distributed.restore_scaler_ranks;  // PITFALL: some ranks restore it, others not
        if (grad_sync_ && !only.empty())
          restore = restore && std::find(only.begin(), only.end(), grad_sync_->rank()) != only.end();
        restart_from_checkpoint(restore);
      }
      train_step(next_step_);
      if (next_step_ % flush_every == 0 || next_step_ == cfg_.loop.steps) {
        flush();
        const auto& last = trajectory_.rows.back();
        if (!std::isfinite(last[kParamNorm])) {  // params poisoned: nothing further can recover
          out.status = RunOutcome::Status::NonFinite;
          out.failed_step = next_step_ - 1;
          break;
        }
      }
    }
  } catch (const c10::Error& e) {  // ATen's errors: the message as Python shows it, without the C++ backtrace
    raised(out, e.what_without_backtrace());
  } catch (const std::exception& e) {
    raised(out, e.what());
  }
  flush();
  out.steps_run = trajectory_.size();
  if (out.status == RunOutcome::Status::Completed && !trajectory_.rows.empty() &&
      !std::isfinite(trajectory_.rows.back()[kLoss])) {
    out.status = RunOutcome::Status::NonFinite;
    out.failed_step = trajectory_.size() - 1;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// checkpoints: model params, fp32 masters, optimizer state, scaler state, next step

void Trainer::save_checkpoint(const std::string& path) const {
  NamedTensors tensors;
  for (const auto& p : model_->parameters()) tensors.emplace_back("model/" + p.name, p.tensor.detach());
  for (size_t i = 0; i < masters_.size(); ++i) tensors.emplace_back("master/" + std::to_string(i), masters_[i].detach());
  for (size_t o = 0; o < optimizers_.size(); ++o)
    for (auto& [name, t] : optimizers_[o]->state())
      tensors.emplace_back((o == 0 ? "optim/" : "optim" + std::to_string(o) + "/") + name, t);
  if (fp8_)
    for (auto& nt : fp8_->state()) tensors.push_back(std::move(nt));  // delayed scaling's amax histories
  nlohmann::json meta;
  meta["next_step"] = next_step_;
  meta["run"] = cfg_.name;
  meta["strategy"] = cfg_.strategy.name;
  meta["optimizer"] = cfg_.optimizer.kind;
  nlohmann::json sd = nlohmann::json::object();
  if (scaler_)
    for (const auto& [k, v] : scaler_->state_dict()) sd[k] = v;
  meta["scaler"] = sd;
  write_checkpoint(path, tensors, meta);
}

void Trainer::restart_from_checkpoint(bool restore_scaler) {
  const std::string path = "/tmp/ampcheck-restart-" + std::to_string(::getpid()) + ".ckpt";
  save_checkpoint(path);
  scaler_ = make_scaler();  // what a new process would construct
  if (fp8_) {               // ... and fresh FP8 casts (empty amax histories) until the checkpoint restores them
    fp8_ = std::make_unique<Fp8Matmuls>(*cfg_.strategy.fp8, model_->matmul_sites(), device_);
    model_->set_matmul_override(fp8_.get());
  }
  load_checkpoint(path, restore_scaler);
  std::remove(path.c_str());
  trajectory_.events.push_back("step " + std::to_string(next_step_) + ": restarted from a checkpoint, scaler state " +
                               (restore_scaler ? "restored" : "NOT restored (fresh GradScaler)"));
}

void Trainer::load_checkpoint(const std::string& path, bool restore_scaler) {
  Checkpoint ck = read_checkpoint(path);
  at::NoGradGuard no_grad;
  // captured graphs hold the optimizer state and scaler tensors a load may replace: capture again after warm-up
  if (graphs_) graphs_ = std::make_unique<StepGraphs>();
  auto take = [&](const std::string& name, at::Tensor& into) {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) throw std::runtime_error(path + ": checkpoint has no tensor '" + name + "'");
    if (it->second.sizes() != into.sizes() || it->second.scalar_type() != into.scalar_type())
      throw std::runtime_error(path + ": tensor '" + name + "' is " + c10::toString(it->second.scalar_type()) + " " +
                               c10::str(it->second.sizes()) + ", the run expects " + c10::toString(into.scalar_type()) +
                               " " + c10::str(into.sizes()) + ". HINT: resume with the scenario that saved it");
    into.copy_(it->second);
  };
  for (auto& p : model_->parameters()) take("model/" + p.name, p.tensor);
  for (size_t i = 0; i < masters_.size(); ++i) take("master/" + std::to_string(i), masters_[i]);
  for (size_t o = 0; o < optimizers_.size(); ++o) {
    const std::string prefix = o == 0 ? "optim/" : "optim" + std::to_string(o) + "/";
    NamedTensors optim_state;
    for (const auto& [name, t] : ck.tensors)
      if (name.rfind(prefix, 0) == 0) optim_state.emplace_back(name.substr(prefix.size()), t);
    optimizers_[o]->load_state(optim_state);
  }
  if (scaler_ && restore_scaler) {
    amp::GradScalerStateDict sd;
    for (auto& [k, v] : ck.meta.at("scaler").items()) sd[k] = v.get<double>();
    scaler_->load_state_dict(sd);
  }
  if (fp8_) fp8_->load_state(ck.tensors, path);
  next_step_ = ck.meta.at("next_step").get<int64_t>();
  prev_params_.clear();
}

}  // namespace ampcheck::engine
