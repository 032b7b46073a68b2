// Trainer implementation. Comments mark every host-device SYNC POINT; the hot path has none except the
// trajectory flush (every loop.log_every steps) and GradScaler's own skip decision on the non-fused path.
#include "engine/trainer.h"

#include "engine/device.h"
#include "engine/digest.h"
#include "trajectory/run_status.h"

#include <ampcheck/amp/autocast.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <unistd.h>

namespace ampcheck::engine {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// construction

Trainer::Trainer(RunConfig cfg, at::Device device, GradientSync* sync)
    : cfg_(std::move(cfg)),
      device_(device),
      plan_(resolve_engine_plan(cfg_, device_, sync != nullptr)),
      faults_(cfg_.faults),
      grad_sync_(sync),
      probes_(plan_, device_),
      timer_(device) {
  if (grad_sync_ && faults_) faults_ = faults_->for_rank(grad_sync_->rank());  // other ranks' events are not ours
  check_supported(cfg_.strategy, device_);
  numerics_ = std::make_unique<NumericsGuard>(cfg_.strategy, cfg_.stack_fault);
  randomness_ = std::make_unique<RunRandomness>(cfg_.seed, grad_sync_ ? grad_sync_->rank() : 0, device_);
  build_model();
  build_data();
  build_optimizers();
  scaler_ = make_scaler();
  if (plan_.cuda_graphs) {  // capture the step: nothing in it needs the host (the plan checked)
    graphs_ = std::make_unique<StepGraphs>();
    for (auto& opt : optimizers_) opt->keep_lr_on_device(device_);
  }
}

Trainer::~Trainer() = default;

EnginePlan Trainer::plan() const {
  EnginePlan p = plan_;
  for (auto& d : p.decisions)
    if (d.option == "train.cuda_graphs" && d.applied && graphs_)
      d.note = "captured: " + std::to_string(graphs_->graphs()) + " graph(s), " + std::to_string(graphs_->replays()) +
               " of " + std::to_string(next_step_) + " steps replayed";
  return p;
}

std::string Trainer::cuda_graphs_status() const {
  const EnginePlan p = plan();
  const OptionDecision* d = p.find("train.cuda_graphs");
  return !d ? "" : (d->applied ? "" : "uncaptured: ") + d->note;
}

// ---------------------------------------------------------------------------------------------------------------
// one optimizer step

void Trainer::train_step(int64_t step) {
  timer_.start();
  const double lr = scheduled_lr(cfg_.schedule, cfg_.optimizer.lr, step, cfg_.loop.steps);
  for (auto& opt : optimizers_) opt->set_lr(lr);
  const bool full_probe = cfg_.loop.probe_every > 0 && step % cfg_.loop.probe_every == 0;
  randomness_->seed_step(step);  // dropout's masks: a function of (seed, step, rank) only
  std::vector<data::Batch> batches;
  for (int64_t micro = 0; micro < cfg_.loop.micro_batches; ++micro)
    batches.push_back(sampler_->train_batch(step, micro));

  // the device work: run directly, or captured once per kind of step and replayed (engine option train.cuda_graphs)
  pending_rows_.push_back(graphs_ ? step_through_graph(step, full_probe, batches)
                                  : step_on_device(step, full_probe, batches));
  std::array<double, trajectory::kNumColumns> host{};
  host.fill(kNaN);
  host[trajectory::kLr] = lr;
  pending_host_.push_back(host);
  first_nonfinite_.add(model_->take_nonfinite_watch());
  next_step_ = step + 1;
  timer_.stop();
  if (cfg_.loop.digests) record_digests();

  if (static_cast<int64_t>(pending_rows_.size()) >= cfg_.loop.log_every) flush();
  if (cfg_.loop.eval_every > 0 && next_step_ % cfg_.loop.eval_every == 0) {
    flush();
    trajectory_.rows.back()[trajectory::kEvalLoss] = evaluate();
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
  if (!out.defined())
    out = at::empty({trajectory::kNumDeviceColumns}, at::TensorOptions().dtype(at::kDouble).device(device_));
  graphs_->run(kind, [&] { out.copy_(step_on_device(step, full_probe, static_batches_)); });
  return out.clone();
}

// The step's device work, phase by phase; returns its trajectory row ((kNumDeviceColumns,) fp64 on the device).
// No host sync on the captured paths (StepGraphs::why_not lists the configurations that need one).
at::Tensor Trainer::step_on_device(int64_t step, bool full_probe, const std::vector<data::Batch>& batches) {
  zero_grads();

  // forward + backward over the micro-batches (FP8 casts record their probes in between)
  if (precision_) precision_->begin_step(full_probe);
  at::Tensor loss = forward_backward(step, batches);
  if (precision_) precision_->end_step();

  // planted gradient events (what this rank's backward produced)
  if (faults_) faults_->on_grads(model_->parameters(), step, trajectory_.events);

  // data-parallel all-reduce point (none in a single process)
  if (grad_sync_) grad_sync_->all_reduce(model_grads());

  // probes: the gradient as backward produced it (scaled; true norm = scaled norm / scale), a snapshot of the params
  const std::vector<at::Tensor> snapshot = full_probe ? stepped_parameters() : std::vector<at::Tensor>{};
  const at::Tensor found = probes_.before_step(model_grads(), scale_or_one(/*copy=*/true), full_probe, snapshot);
  if (found.defined() && inf_check_from_probe()) scaler_->record_inf_check(*optimizers_[0], found);

  // fp16/bf16 model grads -> fp32 master grads
  masters_.take_grads(model_->parameters());

  unscale_and_clip();
  const at::Tensor skipped = step < cfg_.loop.delay_steps ? delayed_step() : optimizer_step();
  update_scale();
  masters_.copy_back(model_->parameters());

  // data parallel: a sharded optimizer's parameters gathered, ranks compared, the loss averaged over the ranks
  if (grad_sync_) loss = grad_sync_->after_step(step, model_->parameter_tensors(), loss, scale_or_one(), skipped);

  // probes after the step, and the row
  return probes_.row(loss, skipped, optimizers_.empty() ? nullptr : optimizers_[0].get(), stepped_parameters());
}

// zero_grad (PITFALL zero_grad: false skips it: backward adds this step's grads to the last step's), and the model's
// grads too where the optimizers do not hold every model parameter (masters, a ZeRO-1 shard)
void Trainer::zero_grads() {
  if (!cfg_.loop.zero_grad) return;
  for (auto& opt : optimizers_) opt->zero_grad();
  if (!masters_.empty() || grad_sync_)
    for (auto& p : model_->parameters()) p.tensor.mutable_grad() = at::Tensor();
}

at::Tensor Trainer::forward_backward(int64_t step, const std::vector<data::Batch>& batches) {
  const int64_t M = cfg_.loop.micro_batches;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  for (int64_t micro = 0; micro < M; ++micro) {
    const data::Batch& batch = batches[static_cast<size_t>(micro)];
    std::vector<std::string> scratch;
    models::ForwardOptions fwd =
        faults_ ? faults_->forward_options(step, micro == 0 ? trajectory_.events : scratch) : models::ForwardOptions{};
    if (plan_.model.head_loss == models::HeadLoss::Fused)
      fwd.loss_grad_scale = loss_grad_scale(step);  // (only it reads the hint)
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
    if (faults_) loss = faults_->on_loss(loss, step, micro == 0 ? trajectory_.events : scratch);
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
  if (faults_) faults_->after_backward(model_->parameters(), step);
  return loss_sum;
}

// What backward() will bring to the model's loss, as the fused LM head needs to know in its forward: the loss scale
// when the loss goes through scaler.scale (the value scale() is about to create on the first step), times a planted
// loss-scale event's factor, divided by the micro-batches where the loss is; undefined = 1.
at::Tensor Trainer::loss_grad_scale(int64_t step) const {
  const int64_t M = cfg_.loop.micro_batches;
  const double k =
      (faults_ ? faults_->loss_factor(step) : 1.0) * (M > 1 && cfg_.loop.divide_loss_by_micro_batches ? 1.0 / M : 1.0);
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

// LoopConfig::digests: the digest of every parameter (after the step) and of its gradient (as the step used it).
void Trainer::record_digests() {
  trajectory::StepDigests& d = trajectory_.digests;
  const auto& params = model_->parameters();
  if (d.tensors.empty())
    for (const auto& p : params) d.tensors.push_back(p.name);
  std::vector<uint64_t> values, grads;
  for (const auto& p : params) {
    values.push_back(tensor_digest(p.tensor));
    grads.push_back(tensor_digest(p.tensor.grad()));
  }
  d.params.push_back(std::move(values));
  d.grads.push_back(std::move(grads));
}

// A step the run's configuration delays (LoopConfig::delay_steps, the references' `skip` noise run): nothing is
// stepped, and the row says skipped, as after a GradScaler's skip.
at::Tensor Trainer::delayed_step() { return at::ones({}, at::TensorOptions().dtype(at::kFloat).device(device_)); }

// update: a static scale is pinned by update(S); a dynamic one follows update() (never, PITFALL call_update: false).
// update() without any inf check recorded since the last one (step_through_scaler: false) raises, as PyTorch does.
void Trainer::update_scale() {
  if (!scaler_) return;
  if (cfg_.strategy.scaler.kind == ScalerKind::Static) scaler_->update(cfg_.strategy.scaler.init_scale);
  else if (cfg_.loop.call_update)
    scaler_->update();
}

// unscale + clip: one norm over every parameter, as PyTorch's recipe; unscale_ first unless PITFALL
// clip_unscale_first: false clips the still-scaled grads
void Trainer::unscale_and_clip() {
  if (cfg_.loop.clip_max_norm <= 0) return;
  std::vector<at::Tensor> grads;
  for (auto& opt : optimizers_) {
    if (scaler_ && cfg_.loop.clip_unscale_first) scaler_->unscale_(*opt);
    for (const auto& p : opt->params()) grads.push_back(p.grad());
  }
  clip_grad_norm_(grads, cfg_.loop.clip_max_norm);
}

at::Tensor Trainer::scale_or_one(bool copy) const {
  if (scaler_ && scaler_->scale_tensor().defined())
    return copy ? scaler_->scale_tensor().clone() : scaler_->scale_tensor();
  return at::ones({}, at::TensorOptions().dtype(at::kFloat).device(device_));
}

// Whether, this step, the fused grad check's pass stands for the GradScaler's inf check (the plan's static conditions
// engine_plan.h, and at this step: a scale exists — scale() has run —, the single optimizer is on the fused path, and
// no check was recorded yet this step, as unscale_ inside the accumulation loop, a pitfall, makes its own). Without a
// scale the scaler's own step() raises PyTorch's error.
bool Trainer::inf_check_from_probe() const {
  return plan_.inf_check_from_probe && scaler_ && scaler_->is_enabled() && scaler_->scale_tensor().defined() &&
         optimizers_.size() == 1 && optimizers_[0]->supports_amp_scaling() &&
         scaler_->stage(*optimizers_[0]) == amp::GradScaler::Stage::READY;
}

std::vector<at::Tensor> Trainer::stepped_parameters() const {
  return masters_.empty() ? model_->parameter_tensors() : masters_.detached();
}

std::vector<at::Tensor> Trainer::model_grads() const {
  std::vector<at::Tensor> gs;
  for (const auto& p : model_->parameters())
    if (p.tensor.grad().defined()) gs.push_back(p.tensor.grad());
  return gs;
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
    for (int c = 0; c < trajectory::kNumDeviceColumns; ++c) host[c] = acc[i][c];
    host[trajectory::kStepTimeMs] = i < ms.size() ? ms[i] : kNaN;
    const auto row_step = static_cast<int64_t>(trajectory_.rows.size());
    first_nonfinite_.note(row_step, host, i, scaler_ && row_step >= cfg_.loop.delay_steps, model_->module_tree());
    trajectory_.rows.push_back(host);
  }
  pending_rows_.clear();
  pending_host_.clear();
  first_nonfinite_.clear_pending();
  if (precision_) precision_->flush_into(trajectory_);
  if (progress_) progress_(trajectory_.size() - 1, trajectory_);
}

double Trainer::evaluate() {
  at::NoGradGuard no_grad;
  std::optional<amp::AutocastGuard> autocast;
  if (cfg_.strategy.autocast) autocast.emplace(device_.type(), *cfg_.strategy.autocast);
  at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (int64_t i = 0; i < cfg_.loop.eval_batches; ++i) {
    const data::Batch b = sampler_->eval_batch(i);
    models::ForwardOptions eval;
    eval.training = false;
    sum += model_->loss(b.inputs, b.targets, eval).to(at::kDouble);
  }
  model_->take_nonfinite_watch();  // evaluation is no training step: its watch is dropped
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
  first_nonfinite_.clear_pending();
  model_->take_nonfinite_watch();
  if (precision_) precision_->discard();
  timer_.discard();
}

RunOutcome Trainer::run() {
  RunOutcome out;
  const int64_t flush_every = std::max<int64_t>(1, cfg_.loop.log_every);
  const int64_t end = cfg_.loop.stop_after > 0 ? std::min(cfg_.loop.stop_after, cfg_.loop.steps) : cfg_.loop.steps;
  try {
    while (next_step_ < end) {
      if (cfg_.loop.resume_at > 0 && next_step_ == cfg_.loop.resume_at) {
        flush();
        bool restore = cfg_.loop.resume_restore_scaler;
        const auto& only = cfg_.distributed.restore_scaler_ranks;  // PITFALL: some ranks restore it, others not
        if (grad_sync_ && !only.empty())
          restore = restore && std::find(only.begin(), only.end(), grad_sync_->rank()) != only.end();
        restart_from_checkpoint(restore);
      }
      train_step(next_step_);
      if (next_step_ % flush_every == 0 || next_step_ == end) {
        flush();
        const auto& last = trajectory_.rows.back();
        if (!std::isfinite(last[trajectory::kParamNorm])) {  // params poisoned: nothing further can recover
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
  out.first_nonfinite_step = first_nonfinite_.step;
  out.first_nonfinite_module = first_nonfinite_.module;
  out.first_nonfinite_pass = first_nonfinite_.pass;
  if (out.status == RunOutcome::Status::Completed && !trajectory_.rows.empty() &&
      !std::isfinite(trajectory_.rows.back()[trajectory::kLoss])) {
    out.status = RunOutcome::Status::NonFinite;
    out.failed_step = trajectory_.size() - 1;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// checkpoints (engine/checkpoint.h): model params, fp32 masters, optimizer state, scaler state, FP8 state, next step

TrainingState Trainer::state() {
  return TrainingState{model_->parameters(), masters_, optimizers_, scaler_.get(), precision_.get(), next_step_};
}

void Trainer::save_checkpoint(const std::string& path) const {
  nlohmann::json meta;
  meta["run"] = cfg_.name;
  meta["strategy"] = cfg_.strategy.name;
  meta["optimizer"] = cfg_.optimizer.kind;
  save_training_state(path, const_cast<Trainer*>(this)->state(), meta);
}

void Trainer::restart_from_checkpoint(bool restore_scaler) {
  const std::string path = "/tmp/ampcheck-restart-" + std::to_string(::getpid()) + ".ckpt";
  save_checkpoint(path);
  scaler_ = make_scaler();  // what a new process would construct
  // ... and fresh FP8 casts (empty amax histories) until the checkpoint restores them
  if (precision_) precision_ = make_precision_runtime(cfg_.strategy, *model_, device_);
  load_checkpoint(path, restore_scaler);
  std::remove(path.c_str());
  trajectory_.events.push_back("step " + std::to_string(next_step_) + ": restarted from a checkpoint, scaler state " +
                               (restore_scaler ? "restored" : "NOT restored (fresh GradScaler)"));
}

void Trainer::load_checkpoint(const std::string& path, bool restore_scaler) {
  // captured graphs hold the optimizer state and scaler tensors a load may replace: capture again after warm-up
  if (graphs_) graphs_ = std::make_unique<StepGraphs>();
  TrainingState st = state();
  load_training_state(path, st, restore_scaler);
  probes_.forget_snapshot();
}

}  // namespace ampcheck::engine
