// A scenario's optimizer:, schedule:, train: and distributed: (parsing.h).
#include "scenario/parsing.h"

namespace ampcheck::scenario::parsing {

void parse_optimizer(Fields f, engine::OptimizerConfig& o) {
  o.kind = f.choice("kind", o.kind, {"adamw", "sgd"});
  o.lr = f.num("lr", o.lr);
  if (!(o.lr >= 0)) f.fail_key("lr", "must be >= 0");
  YAML::Node betas = f.raw("betas");
  if (betas.IsDefined() && !betas.IsNull()) {
    if (!betas.IsSequence() || betas.size() != 2) f.fail(betas, "optimizer.betas: expected [beta1, beta2]");
    o.beta1 = f.num_at(betas[0], "betas[0]");
    o.beta2 = f.num_at(betas[1], "betas[1]");
    const double beta[2] = {o.beta1, o.beta2};
    for (int i : {0, 1})  // torch.optim's own check ("Invalid beta parameter at index i")
      if (!(beta[i] >= 0 && beta[i] < 1)) f.fail_at(betas[i], "betas[" + std::to_string(i) + "]", "must be in [0, 1)");
  }
  o.eps = f.num("eps", o.eps);
  o.weight_decay = f.num("weight_decay", o.weight_decay);
  o.momentum = f.num("momentum", o.momentum);
  o.fused = f.boolean("fused", o.fused);
  if (o.kind == "sgd" && o.fused) f.fail_key("fused", "SGD has no fused path in ampcheck");
  f.done();
}

void parse_schedule(Fields f, engine::ScheduleConfig& s) {
  s.kind = f.choice("kind", s.kind, {"cosine", "constant"});
  s.warmup_steps = f.ranged("warmup_steps", s.warmup_steps, 0, kMaxSteps, "as train.steps");
  s.min_lr_ratio = f.num("min_lr_ratio", s.min_lr_ratio);
  f.done();
}

void parse_loop(Fields f, engine::LoopConfig& l) {
  l.steps = f.bounded("steps", l.steps, kMaxSteps, "a bound on time: a trajectory row per step");
  l.micro_batches = f.bounded("micro_batches", l.micro_batches, kMaxMicroBatches, "a bound on time");
  l.unscale_each_micro_batch = f.boolean("unscale_each_micro_batch", l.unscale_each_micro_batch);
  if (f.has("clip")) {
    Fields c = f.map("clip");
    l.clip_max_norm = c.num("max_norm", 1.0);
    if (!(l.clip_max_norm > 0)) c.fail_key("max_norm", "must be > 0");
    l.clip_unscale_first = c.boolean("unscale_first", true);
    c.done();
  } else {
    f.raw("clip");
  }
  l.call_update = f.boolean("call_update", l.call_update);
  l.divide_loss_by_micro_batches = f.boolean("divide_loss_by_micro_batches", l.divide_loss_by_micro_batches);
  l.step_through_scaler = f.boolean("step_through_scaler", l.step_through_scaler);
  l.scale_loss = f.boolean("scale_loss", l.scale_loss);
  l.zero_grad = f.boolean("zero_grad", l.zero_grad);
  l.eval_every = f.ranged("eval_every", l.eval_every, 0, kMaxSteps, "0 = never");
  l.eval_batches =
      f.bounded("eval_batches", l.eval_batches, kMaxEvalBatches, "a bound on time: forwards per evaluation");
  l.log_every = f.positive("log_every", l.log_every);
  l.probe_every = f.integer("probe_every", l.probe_every);
  l.cuda_graphs = f.boolean("cuda_graphs", l.cuda_graphs);
  l.fused_grad_check = f.boolean("fused_grad_check", l.fused_grad_check);
  l.fused_param_norm = f.boolean("fused_param_norm", l.fused_param_norm);
  l.two_optimizers = f.boolean("two_optimizers", l.two_optimizers);
  l.aux_loss_weight = f.num("aux_loss_weight", l.aux_loss_weight);
  if (l.aux_loss_weight != 0 && !l.two_optimizers)
    f.fail_key("aux_loss_weight",
               "the second loss acts on the second optimizer's parameters: needs two_optimizers: true");
  if (f.has("resume")) {
    Fields r = f.map("resume");
    l.resume_at = r.positive("at_step", 1);
    l.resume_restore_scaler = r.boolean("restore_scaler", true);
    r.done();
    if (l.resume_at >= l.steps) f.fail_key("resume", "resume.at_step must be < train.steps");
  } else {
    f.raw("resume");
  }
  if (l.probe_every < 0) f.fail_key("probe_every", "must be >= 0 (0 = never)");
  f.done();
}

void parse_distributed(Fields f, engine::RunConfig& run) {
  auto& d = run.distributed;
  d.enabled = true;
  d.world_size = f.bounded("world_size", 2, kMaxWorldSize, "a bound on processes: a rank is a process");
  d.backend = f.choice("backend", "gloo", {"gloo", "nccl"});
  const std::string rd = f.choice("reduce_dtype", "fp32", {"fp32", "bf16", "fp16"});
  d.reduce_dtype = rd == "bf16" ? at::kBFloat16 : rd == "fp16" ? at::kHalf : at::kFloat;
  d.sharding = f.choice("sharding", "none", {"none", "zero1"});
  d.found_inf_agreement = f.boolean("found_inf_agreement", true);
  if (!d.found_inf_agreement && d.sharding != "zero1")
    f.fail_key("found_inf_agreement",
               "only zero1 shards the inf check (plain data parallel all-reduces the grads, "
               "so every rank sees every inf)");
  YAML::Node ranks = f.raw("restore_scaler_ranks");
  if (ranks.IsDefined() && !ranks.IsNull()) {
    if (!ranks.IsSequence()) f.fail_key("restore_scaler_ranks", "expected a list of ranks");
    if (run.loop.resume_at <= 0) f.fail_key("restore_scaler_ranks", "needs train.resume (the restart it applies to)");
    for (size_t j = 0; j < ranks.size(); ++j) {
      const std::string field = "restore_scaler_ranks[" + std::to_string(j) + "]";
      const int64_t r = f.integer_at(ranks[j], field);
      if (r < 0 || r >= d.world_size)
        f.fail_at(ranks[j], field, "expected 0 <= rank < world_size, got " + std::to_string(r));
      d.restore_scaler_ranks.push_back(r);
    }
  }
  d.check_every = f.positive("check_every", 1);
  d.timeout_s = f.positive_amount("timeout_s", 300, kMaxTimeoutSeconds, "seconds");
  d.bucket_mb = f.positive_amount("bucket_mb", 25, kMaxBucketMiB, "MiB");
  if (run.data.batch_size % d.world_size != 0)
    f.fail_key("world_size", "data.batch_size (" + std::to_string(run.data.batch_size) +
                                 ", the global batch) must be "
                                 "divisible by world_size (" +
                                 std::to_string(d.world_size) + "): each rank reads an equal slice");
  if (d.sharding == "zero1" && (run.strategy.master_weights || run.loop.two_optimizers))
    f.fail_key("sharding",
               "zero1 shards one optimizer over the model's own parameters: not with master_weights or "
               "two_optimizers");
  f.done();
}

}  // namespace ampcheck::scenario::parsing
