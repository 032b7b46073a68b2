// Model — the interface every ampcheck model implements: named leaf parameters, a next-token loss, a description.
// Models are pure fp32/fp16/bf16 arithmetic on ATen ops; precision policy (casts, autocast, master weights) lives in
// engine/precision, never here. Letters: B batch, T time (sequence), C channels, V vocab, H heads, D head size.
#pragma once

#include "models/module_tree.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampcheck::models {

struct ModelConfig;  // below

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // leaf, requires_grad
  bool decay;         // AdamW weight decay applies (matrices and embeddings, not biases / norms)
};

// Where an activation-scale event multiplies the forward pass.
enum class ActivationSite {
  Residual,       // the residual stream after block `hidden_scale_block` (mlp: the hidden layer's output). Under
                  // autocast it stays fp32 and the next LayerNorm normalises it away: fp16 autocast does not overflow.
  MlpInput,       // gpt: the ln_2 output feeding block `hidden_scale_block`'s MLP. Under fp16 autocast (or .half())
                  // that first MLP linear runs in fp16: values past 65504 become inf, the forward really overflows.
  MlpInputSpike,  // gpt: the input of block `hidden_scale_block`'s c_fc matmul is multiplied by the factor and its
                  // output (bias included) divided by it: exact in FP32 for a power of two, so only a number format
                  // that must fit the spike into its range (FP8 with a stale scale) changes the result.
};

// Planted numerical events inside the forward pass (see inject/). Scaling a hidden state past fp16's max is an
// activation overflow; the default (1.0) does nothing and costs nothing.
struct ForwardOptions {
  double hidden_scale = 1.0;  // multiply the activation at `hidden_scale_at` of block `hidden_scale_block`
  int64_t hidden_scale_block = 0;
  ActivationSite hidden_scale_at = ActivationSite::Residual;
  // What backward() will be called with for this loss (the GradScaler's scale; undefined = 1). Only the fused LM
  // head (model.head_loss: fused) reads it: it computes its gradient in the forward, at this scale.
  at::Tensor loss_grad_scale;
  bool training = true;  // false: evaluation (no dropout, as after model.eval())
};

// Who computes a model's matmuls and embedding lookups. A model names each site (gpt: "h.<l>.attn.c_attn",
// "h.<l>.attn.c_proj", "h.<l>.mlp.c_fc", "h.<l>.mlp.c_proj", "lm_head", and the lookups "wte", "wpe") and, by default,
// computes them with at::linear / at::embedding. A strategy that changes how matmuls are computed (engine/fp8: FP8
// through at::_scaled_mm) installs an override; the model never sees a number format. Returning an undefined tensor
// leaves that site to the default.
class MatmulOverride {
 public:
  virtual ~MatmulOverride() = default;
  // x @ w^T + b (b may be undefined); x is (..., K), w (N, K)
  virtual at::Tensor linear(int site, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) = 0;
  virtual at::Tensor embedding(int site, const at::Tensor& w, const at::Tensor& indices) = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Mean next-token cross-entropy. inputs, targets: (B, T) int64. Returns a 0-dim tensor.
  virtual at::Tensor loss(const at::Tensor& inputs, const at::Tensor& targets, const ForwardOptions& opts = {}) = 0;
  virtual std::string kind() const = 0;
  virtual std::string describe() const;
  // Model FLOPs of one training step (forward + backward) per token at sequence length seq_len, the convention of
  // PaLM's MFU: 6 per weight of every matmul it takes part in, plus attention's 12 * layers * width * seq_len for
  // GPTs. Default: 6 * parameters.
  virtual double training_flops_per_token(int64_t seq_len) const;

  std::vector<NamedParameter>& parameters() { return params_; }
  const std::vector<NamedParameter>& parameters() const { return params_; }
  std::vector<at::Tensor> parameter_tensors() const;
  int64_t parameter_count() const;
  at::Device device() const { return params_.front().tensor.device(); }
  // what to() cast the parameters to (model.keep_fp32's modules keep theirs in fp32)
  at::ScalarType dtype() const { return policy_.model_dtype; }

  // The modules, as PyTorch's named_modules() (models::module_tree of the model's config), in its order (gpt, mlp:
  // forward pre-order; llama: transformers' registration order, a layer's self_attn and mlp before its two norms).
  const std::vector<ModuleInfo>& module_tree() const { return policy_.tree(); }
  // The non-finite watch (module_tree.h): off by default; take_nonfinite_watch() hands over one step's record.
  void set_nonfinite_watch(bool on) { policy_.set_watch(on); }
  NonfiniteWatch take_nonfinite_watch() { return policy_.take(); }

  // The model's matmul and lookup sites, by index (see MatmulOverride); empty when it has none to override.
  virtual std::vector<std::string> matmul_sites() const { return {}; }
  // Installs (or, with nullptr, removes) the override; it must outlive its use.
  void set_matmul_override(MatmulOverride* o) { matmul_override_ = o; }

  // Moves / casts every parameter in place (what Python's model.to(device, dtype) / model.half() do): the new
  // tensors are fresh leaves that require grad. Existing grads are dropped. model.keep_fp32's modules' parameters
  // stay fp32.
  void to(at::Device device, at::ScalarType dtype);

 protected:
  // the module tree and model.keep_fp32 (throws std::invalid_argument for a name not in the tree)
  void configure_modules(const ModelConfig& resolved);
  ModulePolicy& policy() { return policy_; }
  // Registers a parameter initialised on the CPU in fp32 (so CPU and GPU runs start from identical weights).
  at::Tensor& add_parameter(std::string name, at::Tensor init_fp32_cpu, bool decay);
  MatmulOverride* matmul_override() const { return matmul_override_; }

 private:
  MatmulOverride* matmul_override_ = nullptr;
  std::vector<NamedParameter> params_;
  ModulePolicy policy_;
};

// ENGINE OPTION (gpt) model.head_loss: how the tied output projection and the cross-entropy are computed (below).
enum class HeadLoss { Stock, Chunked, Fused };
const char* head_loss_name(HeadLoss h);             // "stock" | "chunked" | "fused"
HeadLoss parse_head_loss(const std::string& name);  // throws std::invalid_argument naming the known ones

struct ModelConfig {
  std::string kind = "gpt";     // gpt | mlp | llama
  std::string preset = "nano";  // see presets in gpt.cpp / mlp.cpp; explicit fields below override (0 = preset)
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_embd = 0;
  int64_t block_size = 0;  // max sequence length T
  int64_t vocab_size = 0;
  int64_t mlp_hidden = 0;        // mlp: hidden width; llama: the SwiGLU MLP's intermediate size
  double dropout = 0.0;          // off by default (determinism); applied to attention / residual outputs when > 0
  uint64_t seed = 1337;          // initialisation seed
  double init_perturb_ulps = 0;  // perturb every initial weight by this many ulps (for noise-spread runs)
  // PITFALL knob (gpt): cast the attention query alone to this dtype before scaled_dot_product_attention, as hand
  // code that half()s one tensor does; PyTorch then refuses the mixed dtypes. "" = off.
  std::string attention_query_dtype;
  // ENGINE OPTION (gpt): how the tied output projection and the cross-entropy are computed. "stock": at::linear
  // then at::cross_entropy_loss (the (B·T × V) logits held whole); "chunked": fused in chunks of head_chunk_rows
  // rows (0 = ~256 MiB of fp32 logits per chunk), the logits never held whole (models/head_loss.h).
  HeadLoss head_loss = HeadLoss::Stock;
  int64_t head_chunk_rows = 0;
  // ENGINE OPTION (gpt): each residual add fused with the LayerNorm after it, one CUDA C++ kernel forward and one
  // backward (kernels::add_layer_norm), the normalised output written directly in the autocast dtype. Applies where
  // the engine plan applies it (fp32 parameters, no dropout, no attention-dtype pitfall: engine/engine_plan.h) and on
  // every step without a planted activation event; elsewhere the stock ops run.
  bool fused_layernorm = false;
  // ENGINE OPTION (gpt): every block Linear's bias gradient as one column-sum pass over its output gradient, fused
  // with the GELU backward for the MLP's first Linear (kernels::linear_bias_gelu); forward and the GEMMs as stock.
  // Applies wherever no FP8 matmul replaces the Linear.
  bool fused_bias_gelu = false;
  // ENGINE OPTION (gpt): work around the block Linears' backward done in cuBLASLt's GEMMs (kernels/gemm_epilogues.h):
  // the GELU backward in c_proj's input-gradient GEMM (DGELU epilogue), each Linear's weight gradient straight from
  // its GEMM in fp32 (bf16), the fused head's weight gradient summed in fp32 inside the GEMM (bf16); forward as stock,
  // its weights cast for the step in one pass (kernels::cast_many), bias gradients by the column sums. Applies on CUDA
  // under bf16 / fp16 autocast where no FP8 matmul replaces the Linear and no planted spike scales it; elsewhere
  // fused_bias_gelu's path or the stock ops run.
  bool gemm_epilogues = false;
  // ---- llama (models/llama.h): the architecture, 0 / -1 = the preset's
  int64_t n_kv_head = 0;    // grouped-query attention: key/value heads, dividing n_head (n_head = multi-head)
  double rope_theta = 0;    // RoPE base (the presets': 10000)
  int tie_embeddings = -1;  // 1: lm_head is model.embed_tokens (Llama 3.2 1B); 0: its own weight (Llama 2 / 3 8B)
  double rms_norm_eps = 0;  // RMSNorm epsilon (the presets': 1e-5, Llama 2's)
  bool sdpa = true;  // attention by at::scaled_dot_product_attention; false: eager (HF's eager_attention_forward)
  // Outlier features ("massive activations" of trained LLMs): the first outlier_channels channels of the token
  // embedding's output multiplied by outlier_scale — a fixed part of the model's function (the FP32 reference has it
  // too), so the residual stream carries a few channels of |x| in the hundreds. 0 / 1 = none.
  int64_t outlier_channels = 0;
  double outlier_scale = 1.0;
  // ---- llama PITFALL knobs (each corrected in the FP32 reference; the default is the ecosystem's fix)
  bool rmsnorm_fp32 = true;  // false: RMSNorm's variance computed in the input dtype (fp16 x^2 overflows past 256)
  std::string rope_dtype = "fp32";  // fp32 | bf16 | fp16: the dtype the rotary positions, angles, cos and sin are
                                    // computed in (fp32 with autocast off is the fix)
  bool softmax_fp32 = true;         // false (eager attention): softmax in the scores' dtype instead of fp32
  bool logits_fp32 = true;          // false: cross-entropy on the logits as they are (bf16 under a bf16 model)
  // Set by the engine plan (engine/engine_plan.h), not by scenarios: the dtype the Linears compute in (the strategy's
  // autocast dtype, else the parameters'), which the fused ops write their outputs in as at::linear would. The model
  // reads it instead of the thread-local autocast state.
  at::ScalarType compute_dtype = at::kFloat;
  // PRECISION POLICY per module: these modules (names of module_tree(): "h.1.attn.c_proj", "h.2", "lm_head",
  // "model.layers.1.mlp.down_proj") and their children compute in FP32 — autocast off inside them, their floating
  // inputs cast to fp32; where the strategy casts the model whole (bf16 / fp16 parameters) their parameters stay fp32
  // and their outputs are cast back to the model's dtype. A fast path that covers a kept module (fused head, fused
  // LayerNorm, GEMM epilogues, FP8 matmuls) leaves it to the ATen path (the engine plan says so). Empty: none.
  std::vector<std::string> keep_fp32;
};

// Whether a parameter or matmul site belongs to a transformer block (gpt "h.<l>.*", llama "model.layers.<l>.*"):
// what FP8's `layers: blocks` and the two-optimizer split take as the blocks.
bool in_block(const std::string& name);
// Whether a matmul site is an embedding lookup (gpt "wte", "wpe"; llama "model.embed_tokens").
bool is_lookup_site(const std::string& site);
// The module tree of a resolved config without building the model (module_tree.h's ModuleInfo).
std::vector<ModuleInfo> module_tree(const ModelConfig& resolved);

// Builds a model from its config on CPU fp32 (deterministic in seed); call to() afterwards.
std::unique_ptr<Model> make_model(const ModelConfig& cfg);
// Fills the preset's numbers into cfg's zero fields; throws std::invalid_argument for an unknown kind/preset and for
// a dimension a model cannot be built with (n_layer, n_embd, n_head, n_kv_head, mlp_hidden, block_size below 1,
// vocab_size below 2): the scenario parser bounds each first, naming the field (scenario.h), this is the backstop
// for every other caller.
ModelConfig resolve_preset(ModelConfig cfg);
// The parameters (elements) a resolved config's model holds, without building it — exactly Model::parameter_count()
// of make_model(resolved); a double, so that no dimensions overflow it (exact below 2^53).
double parameter_count(const ModelConfig& resolved);
std::vector<std::string> preset_names(const std::string& kind);

}  // namespace ampcheck::models
