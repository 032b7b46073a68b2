// EnginePlan: each requested engine option, applied or refused with its reason (engine_plan.h).
#include "engine/engine_plan.h"

#include "engine/precision.h"
#include "engine/step_graph.h"
#include "kernels/fused.h"
#include "kernels/gemm_epilogues.h"

namespace ampcheck::engine {

namespace {

std::string dtype_str(at::ScalarType t) { return dtype_name(t); }

// where a fused op runs its ATen reference instead of the project's CUDA kernel (the same arithmetic, as fast as the
// stock ops or slower): worth saying in the report, since the option then buys no speed
std::string reference_note(const at::Device& device) {
  if (!device.is_cuda()) return "ATen reference: no CUDA kernels on " + device.str();
  if (!kernels::cuda_kernels_built()) return "ATen reference: this build has no CUDA kernels";
  return "";
}

// FP8 matmuls replace the block Linears (every fp8 layers setting includes the blocks)
bool fp8_blocks(const RunConfig& cfg) { return cfg.strategy.fp8.has_value(); }

// model.keep_fp32 expanded: every module of the tree that is kept or inside a kept one, in tree order
std::vector<std::string> kept_modules(const models::ModelConfig& req) {
  std::vector<std::string> out;
  if (req.keep_fp32.empty()) return out;
  for (const auto& m : models::module_tree(models::resolve_preset(req)))
    for (const auto& k : req.keep_fp32)
      if (models::parameter_in_module(m.name, k)) {
        out.push_back(m.name);
        break;
      }
  return out;
}
bool is_block_linear(const std::string& m) {
  for (const char* leaf :
       {".attn.c_attn", ".attn.c_proj", ".mlp.c_fc", ".mlp.c_proj", ".self_attn.q_proj", ".self_attn.k_proj",
        ".self_attn.v_proj", ".self_attn.o_proj", ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj"}) {
    const std::string l = leaf;
    if (m.size() > l.size() && m.compare(m.size() - l.size(), l.size(), l) == 0) return true;
  }
  return false;
}
std::string first_kept(const std::vector<std::string>& kept, bool (*covered)(const std::string&)) {
  for (const auto& m : kept)
    if (covered(m)) return m;
  return "";
}
bool is_head_module(const std::string& m) { return m == "lm_head" || m == "wte"; }
bool is_tied_llama_head(const std::string& m) { return m == "lm_head" || m == "model.embed_tokens"; }
std::string keeps(const std::string& module) {
  return "model.keep_fp32 keeps " + module + " in FP32: the ATen path runs it";
}

bool activation_events(const RunConfig& cfg) { return cfg.faults && cfg.faults->scales_activations(); }

struct Decide {
  EnginePlan& plan;
  // records the decision; returns whether the option applies
  bool operator()(const std::string& option, const std::string& label, const std::string& refused,
                  const std::string& note = "") {
    plan.decisions.push_back({option, label, refused.empty(), refused.empty() ? note : refused});
    return refused.empty();
  }
};

}  // namespace

void request_fast_engine(RunConfig& cfg) {
  cfg.loop.cuda_graphs = cfg.loop.fused_grad_check = cfg.loop.fused_param_norm = true;
  // the GPT's options are requested for a llama too: the plan then says which apply to it and why the others do not
  if (cfg.model.kind != "gpt" && cfg.model.kind != "llama") return;
  const bool fp8_head = cfg.strategy.fp8 && cfg.strategy.fp8->layers != "blocks";
  if (cfg.model.head_loss == models::HeadLoss::Stock && !fp8_head) cfg.model.head_loss = models::HeadLoss::Fused;
  cfg.model.fused_layernorm = cfg.model.fused_bias_gelu = cfg.model.gemm_epilogues = true;
}

EnginePlan resolve_engine_plan(const RunConfig& cfg, const at::Device& device, bool data_parallel) {
  EnginePlan plan;
  Decide decide{plan};
  const models::ModelConfig& req = cfg.model;
  models::ModelConfig& m = plan.model;
  m = req;
  m.head_loss = models::HeadLoss::Stock;
  m.fused_layernorm = m.fused_bias_gelu = m.gemm_epilogues = false;
  // the dtype the model's Linears compute in: what the fused ops write their outputs in (as at::linear would)
  m.compute_dtype = cfg.strategy.autocast ? *cfg.strategy.autocast : cfg.strategy.param_dtype;
  const bool gpt = req.kind == "gpt", llama = req.kind == "llama";
  const std::string not_gpt = llama ? "" : "only the GPT model has it (the model is " + req.kind + ")";
  const std::string ref = reference_note(device);
  const std::vector<std::string> kept = kept_modules(req);
  // the fused head spans the tied lm_head and (its tied path) wte — a llama's lm_head, and the embedding where it is
  // the tied head's weight; the fused LayerNorm every block and ln_f
  const bool tied_llama = llama && !kept.empty() && models::resolve_preset(req).tie_embeddings == 1;
  const std::string kept_head = first_kept(kept, tied_llama ? is_tied_llama_head : is_head_module);
  const std::string kept_block =
      first_kept(kept, [](const std::string& m) { return m.rfind("h.", 0) == 0 || m == "ln_f"; });

  if (req.head_loss != models::HeadLoss::Stock) {
    const bool fused = req.head_loss == models::HeadLoss::Fused;
    const bool fp8_head = cfg.strategy.fp8 && cfg.strategy.fp8->layers != "blocks";
    std::string why = !gpt && !llama        ? not_gpt
                      : (fused && fp8_head) ? "FP8 computes the LM head (fp8 layers " + cfg.strategy.fp8->layers + ")"
                      : (llama && !req.logits_fp32)
                          ? "the logits-dtype pitfall (model.logits_fp32: false) takes the cross-entropy on the logits "
                            "as they are; the fused head computes it in fp32"
                      : !kept_head.empty() ? keeps(kept_head)
                                           : "";
    if (decide("model.head_loss", std::string(models::head_loss_name(req.head_loss)) + " head", why, fused ? ref : ""))
      m.head_loss = req.head_loss;
  }
  if (req.fused_layernorm) {
    std::string why =
        llama             ? "the kernel is a residual add + LayerNorm; llama normalises with RMSNorm (no fused kernel)"
        : !gpt            ? not_gpt
        : req.dropout > 0 ? "dropout sits between the residual adds and the LayerNorms"
        : cfg.strategy.param_dtype != at::kFloat
            ? "the residual stream is " + dtype_str(cfg.strategy.param_dtype) + " (the kernel takes fp32 parameters)"
        : !req.attention_query_dtype.empty() ? "the attention-dtype pitfall changes the block's ops"
        : !kept_block.empty()                ? keeps(kept_block) + " (the fused path spans every block)"
                                             : "";
    std::string note = ref;
    if (activation_events(cfg))
      note += std::string(note.empty() ? "" : "; ") + "stock ops on the steps of a planted activation event";
    if (decide("model.fused_layernorm", "fused residual LayerNorm", why, note)) m.fused_layernorm = true;
  }
  if (req.fused_bias_gelu) {
    std::string why = llama             ? "llama's Linears have no bias and its MLP is SwiGLU, not GELU"
                      : !gpt            ? not_gpt
                      : fp8_blocks(cfg) ? "FP8 matmuls compute the block Linears"
                                        : "";
    if (decide("model.fused_bias_gelu", "fused bias grads + GELU", why, ref)) m.fused_bias_gelu = true;
    for (const auto& k : kept)  // the option stays on for the other Linears
      if (m.fused_bias_gelu && is_block_linear(k))
        decide("model.fused_bias_gelu", "fused bias grads for " + k, keeps(k));
  }
  if (req.gemm_epilogues) {
    // the block Linears' GEMMs take the epilogues in the dtype they compute in — autocast's, or the parameters' for a
    // model cast whole to fp16 / bf16; the fused LM head sums its weight gradient in fp32 inside the GEMM (bf16)
    const at::ScalarType cd = m.compute_dtype;
    std::string why =
        llama  ? "the epilogues are the GPT MLP's (bias, GELU and its derivative); llama's Linears have no bias and "
                 "its MLP is SwiGLU"
        : !gpt ? not_gpt
        : !device.is_cuda()                ? "needs a CUDA device: the run is on " + device.str()
        : !kernels::gemm_epilogues_built() ? "this build has no cuBLASLt"
        : cd != at::kBFloat16 && cd != at::kHalf
            ? "needs bf16 or fp16 compute (autocast or parameters): the strategy computes in " + dtype_str(cd)
        : fp8_blocks(cfg) && m.head_loss != models::HeadLoss::Fused
            ? "FP8 matmuls compute the block Linears (and the LM head is not the fused one)"
            : "";
    std::string note = fp8_blocks(cfg)
                           ? "the fused LM head's weight gradient only: FP8 matmuls compute the block Linears"
                           : "per Linear whose dimensions are multiples of 8; stock ops on the steps of a "
                             "planted MLP spike";
    if (decide("model.gemm_epilogues", "GEMM epilogues", why, note)) m.gemm_epilogues = true;
    for (const auto& k : kept)  // (a kept c_fc or c_proj takes its MLP's pair off the fused GELU GEMMs)
      if (m.gemm_epilogues && is_block_linear(k)) decide("model.gemm_epilogues", "GEMM epilogues for " + k, keeps(k));
  }
  if (cfg.strategy.fp8) {  // FP8 matmuls: the sites of the fp8 layers setting, each kept one left to the ATen path
    const std::string& layers = cfg.strategy.fp8->layers;
    for (const auto& k : kept) {
      const bool site = is_block_linear(k) || (k == "lm_head" && layers != "blocks") ||
                        ((k == "wte" || k == "wpe" || k == "model.embed_tokens") && layers == "all");
      if (site) decide("strategy.fp8", "FP8 matmul for " + k, keeps(k));
    }
  }
  const LoopConfig& loop = cfg.loop;
  if (loop.fused_grad_check) {
    plan.fused_grad_check = decide("train.fused_grad_check", "fused grad check", "", ref);
    plan.inf_check_from_probe = cfg.strategy.scaler.kind != ScalerKind::None && cfg.optimizer.fused &&
                                !cfg.strategy.master_weights && !data_parallel && !loop.two_optimizers &&
                                loop.clip_max_norm <= 0 && loop.step_through_scaler;
    if (plan.inf_check_from_probe)
      plan.decisions.back().note +=
          std::string(ref.empty() ? "" : "; ") + "its pass is also the GradScaler's inf check";
  }
  if (loop.fused_param_norm) {
    std::string why = cfg.optimizer.kind != "adamw"
                          ? "only AdamW's pass sums the parameters (optimizer " + cfg.optimizer.kind + ")"
                      : cfg.strategy.master_weights ? "AdamW steps fp32 master copies, not the model's parameters"
                      : data_parallel               ? "the gradient sync runs around the optimizer step"
                      : loop.two_optimizers         ? "two optimizers share the parameters"
                      : cfg.strategy.param_dtype != at::kFloat
                          ? "AdamW sums fp32 parameters only (they are " + dtype_str(cfg.strategy.param_dtype) + ")"
                          : "";
    plan.grad_norm_from_optimizer =
        why.empty() && cfg.strategy.scaler.kind == ScalerKind::None && loop.clip_max_norm <= 0;
    std::string note = ref;
    if (plan.grad_norm_from_optimizer) note += std::string(note.empty() ? "" : "; ") + "the gradient norm too";
    plan.param_norm_from_optimizer = decide("train.fused_param_norm", "parameter norm from AdamW", why, note);
  }
  if (loop.cuda_graphs)
    plan.cuda_graphs = decide("train.cuda_graphs", "cuda graphs", StepGraphs::why_not(cfg, device, data_parallel));
  return plan;
}

std::string EnginePlan::describe() const {
  std::string applied, refused;
  for (const auto& d : decisions) {
    std::string& out = d.applied ? applied : refused;
    out += (out.empty() ? "" : "; ") + d.label + (d.note.empty() ? "" : " (" + d.note + ")");
  }
  if (decisions.empty()) return "stock";
  if (refused.empty()) return applied;
  return (applied.empty() ? "stock" : applied) + "; not applied: " + refused;
}

const OptionDecision* EnginePlan::find(const std::string& option) const {
  for (const auto& d : decisions)
    if (d.option == option) return &d;
  return nullptr;
}

}  // namespace ampcheck::engine
