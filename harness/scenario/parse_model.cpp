// A scenario's model: and data: (parsing.h).
#include "scenario/parsing.h"

#include "io/text.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace ampcheck::scenario::parsing {

namespace {

// model: the llama architecture and its pitfall knobs (models/model.h); each an error on another kind
void parse_llama_fields(Fields& f, models::ModelConfig& m) {
  const bool llama = m.kind == "llama";
  auto only_llama = [&](const std::string& key, bool set) {
    if (set && !llama) f.fail_key(key, "only for kind llama");
  };
  m.n_kv_head = f.ranged("n_kv_head", 0, 1, kMaxHeads, "a bound on memory; it must divide n_head", "the preset's");
  only_llama("n_kv_head", m.n_kv_head != 0);
  m.rope_theta = f.num("rope_theta", 0.0);
  only_llama("rope_theta", m.rope_theta != 0);
  if (m.rope_theta != 0 && !(m.rope_theta > 1)) f.fail_key("rope_theta", "must be > 1 (0 = the preset's 10000)");
  const std::string tie = f.choice("tie_embeddings", "preset", {"preset", "true", "false"});
  m.tie_embeddings = tie == "preset" ? -1 : tie == "true" ? 1 : 0;
  only_llama("tie_embeddings", m.tie_embeddings >= 0);
  m.rms_norm_eps = f.num("rms_norm_eps", 0.0);
  only_llama("rms_norm_eps", m.rms_norm_eps != 0);
  if (m.rms_norm_eps < 0) f.fail_key("rms_norm_eps", "must be > 0 (0 = the preset's 1e-5)");
  m.sdpa = f.choice("attention", "sdpa", {"sdpa", "eager"}) == "sdpa";
  only_llama("attention", !m.sdpa);
  m.outlier_channels = f.ranged("outlier_channels", 0, 0, kMaxWidth, "");  // <= n_embd: checked once resolved
  only_llama("outlier_channels", m.outlier_channels != 0);
  m.outlier_scale = f.num("outlier_scale", 1.0);
  only_llama("outlier_scale", m.outlier_scale != 1.0);
  if (!(m.outlier_scale > 0)) f.fail_key("outlier_scale", "must be > 0");
  m.rmsnorm_fp32 = f.boolean("rmsnorm_fp32", true);
  only_llama("rmsnorm_fp32", !m.rmsnorm_fp32);
  m.rope_dtype = f.choice("rope_dtype", "fp32", {"fp32", "bf16", "fp16"});
  only_llama("rope_dtype", m.rope_dtype != "fp32");
  m.softmax_fp32 = f.boolean("softmax_fp32", true);
  only_llama("softmax_fp32", !m.softmax_fp32);
  if (!m.softmax_fp32 && m.sdpa)
    f.fail_key("softmax_fp32", "the softmax pitfall is in the eager attention: add attention: eager");
  m.logits_fp32 = f.boolean("logits_fp32", true);
  only_llama("logits_fp32", !m.logits_fp32);
}

// "824,693,522,432": a count as people read it
std::string grouped(double count) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.0f", count);
  std::string s = digits, out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// The model's dimensions resolved, or an error naming the field that made them impossible: an unknown preset is
// model.preset's; a shape the preset's rules refuse ("n_embd (32) must be a multiple of n_head (3)") is the first
// field named in the message that the scenario sets (else the preset's own).
models::ModelConfig resolve_model(Fields& f, const models::ModelConfig& m) {
  try {
    return models::resolve_preset(m);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    const std::vector<std::string> known = models::preset_names(m.kind);
    if (std::find(known.begin(), known.end(), m.preset) == known.end()) f.fail_key("preset", what);
    std::string key = "preset";
    size_t first = std::string::npos;
    for (const char* k : {"n_embd", "n_head", "n_kv_head", "n_layer", "mlp_hidden", "vocab_size", "block_size",
                          "outlier_channels", "rope_theta", "rms_norm_eps"}) {
      const size_t at = what.find(k);
      if (at != std::string::npos && at < first && f.has(k)) first = at, key = k;
    }
    f.fail_key(key, what);
  }
}

}  // namespace

// "gpt nano has 40 modules: wte, wpe, h.0, h.0.ln_1, ...": where the names come from, and a HINT
std::string some_modules(const models::ModelConfig& m, const std::vector<models::ModuleInfo>& tree) {
  std::string out = m.kind + " " + m.preset + " has " + std::to_string(tree.size()) + " modules:";
  for (size_t i = 0; i < tree.size(); ++i) {
    if (i == 12 && tree.size() > 14) {
      out += " ...,";
      i = tree.size() - 2;
    }
    out += " " + tree[i].name + (i + 1 < tree.size() ? "," : "");
  }
  const std::string example = m.kind == "llama" ? "model.layers.0.mlp.down_proj"
                              : m.kind == "mlp" ? "fc.0"
                                                : "h.1.attn.c_proj";
  return out + "; HINT: a module's name is its parameters' prefix: " + example + " owns " + example + ".weight";
}

void parse_model(Fields f, models::ModelConfig& m) {
  m.kind = f.choice("kind", m.kind, {"gpt", "mlp", "llama"});
  m.preset = f.str("preset", m.kind == "mlp" ? "small" : m.kind == "llama" ? "llama-micro" : "nano");
  // every dimension bounded before anything is built from it (scenario.h: the bounds; 0 = the preset's)
  const std::string preset = "the preset's";
  m.n_layer = f.ranged("n_layer", 0, 1, kMaxLayers, "a bound on build time", preset);
  m.n_head = f.ranged("n_head", 0, 1, kMaxHeads, "a bound on memory; it must divide n_embd", preset);
  if (m.n_head != 0 && m.kind == "mlp") f.fail_key("n_head", "only for kind gpt or llama (the mlp has no attention)");
  m.n_embd = f.ranged("n_embd", 0, 1, kMaxWidth, "a bound on memory", preset);
  m.block_size = f.ranged("block_size", 0, 1, kMaxBlockSize, "a bound on memory: T x T attention scores", preset);
  m.vocab_size = f.ranged("vocab_size", 0, kMinVocab, kMaxVocab, "tokens are uint16", preset);
  m.mlp_hidden = f.ranged("mlp_hidden", 0, 1, kMaxHidden, "a bound on memory", preset);
  if (m.mlp_hidden != 0 && m.kind == "gpt")
    f.fail_key("mlp_hidden", "only for kind mlp or llama (gpt's MLP is 4 x n_embd)");
  m.dropout = f.num("dropout", 0.0);
  parse_llama_fields(f, m);
  m.attention_query_dtype = f.choice("attention_query_dtype", "", {"", "fp16", "bf16"});
  if (!m.attention_query_dtype.empty() && m.kind != "gpt") f.fail_key("attention_query_dtype", "only for kind gpt");
  m.head_loss = models::parse_head_loss(f.choice("head_loss", "stock", {"stock", "chunked", "fused"}));
  m.head_chunk_rows =
      f.ranged("head_chunk_rows", 0, 0, kMaxBatchTokens, "0 = automatic; at most a micro-batch's tokens");
  m.fused_layernorm = f.boolean("fused_layernorm", false);
  if (m.fused_layernorm && m.kind != "gpt") f.fail_key("fused_layernorm", "only for kind gpt");
  m.fused_bias_gelu = f.boolean("fused_bias_gelu", false);
  if (m.fused_bias_gelu && m.kind != "gpt") f.fail_key("fused_bias_gelu", "only for kind gpt");
  m.gemm_epilogues = f.boolean("gemm_epilogues", false);
  if (m.gemm_epilogues && m.kind != "gpt") f.fail_key("gemm_epilogues", "only for kind gpt");
  if (m.head_loss != models::HeadLoss::Stock && m.kind != "gpt" && m.kind != "llama")
    f.fail_key("head_loss", "only for kind gpt or llama");
  if (m.dropout < 0 || m.dropout >= 1) f.fail_key("dropout", "must be in [0, 1)");
  YAML::Node keep = f.raw("keep_fp32");
  if (keep.IsDefined() && !keep.IsNull() && !keep.IsSequence())
    f.fail(keep, "model.keep_fp32: expected a list of module names ([h.1.attn.c_proj, lm_head])");
  f.done();
  models::ModelConfig unmarked = m;  // outlier_channels is bounded by the resolved n_embd, named here
  unmarked.outlier_channels = 0;
  const models::ModelConfig resolved = resolve_model(f, unmarked);
  if (m.outlier_channels > resolved.n_embd)
    f.fail_key("outlier_channels", Fields::range_text(0, resolved.n_embd, "", "",
                                                      "the model's n_embd (" + std::to_string(resolved.n_embd) + ")") +
                                       ", got " + std::to_string(m.outlier_channels));
  resolve_model(f, m);
  // the whole model, counted before it is built: each dimension in range can still multiply to hours of building
  const double parameters = models::parameter_count(resolved);
  if (parameters > static_cast<double>(kMaxParameters))
    f.fail_here(grouped(parameters) + " parameters (" + m.kind + ", n_layer " + std::to_string(resolved.n_layer) +
                ", n_embd " + std::to_string(resolved.n_embd) +
                (m.kind == "gpt" ? std::string() : ", mlp_hidden " + std::to_string(resolved.mlp_hidden)) +
                ", vocab_size " + std::to_string(resolved.vocab_size) + ", block_size " +
                std::to_string(resolved.block_size) + "), more than the limit of " +
                grouped(static_cast<double>(kMaxParameters)) +
                " (a bound on build time and memory: 8 GB of fp32 weights, ~30 s to initialise). HINT: fewer layers "
                "or a narrower model");
  if (!keep.IsDefined() || keep.IsNull()) return;
  const std::vector<models::ModuleInfo> tree = models::module_tree(resolved);
  for (size_t i = 0; i < keep.size(); ++i) {
    const std::string field = "keep_fp32[" + std::to_string(i) + "]";
    if (!keep[i].IsScalar()) f.fail_at(keep[i], field, "expected a module name, got " + Fields::describe(keep[i]));
    const std::string name = io::printable_text(keep[i].Scalar());
    if (models::module_index(tree, name) < 0)
      f.fail_at(keep[i], field, "'" + name + "' is not a module of the model (" + some_modules(resolved, tree) + ")");
    m.keep_fp32.push_back(name);
  }
}

namespace {

// A data size that defaults to the model's (0) and may not exceed it: vocab_size, seq_len
int64_t model_sized(Fields& f, const std::string& key, int64_t least, int64_t model_value,
                    const std::string& model_field, const std::string& model_short) {
  const std::string most = "the model's " + model_field + " (" + std::to_string(model_value) + ")";
  const int64_t v = f.ranged(key, 0, least, std::numeric_limits<int64_t>::max(), "", "the model's", most);
  if (v > model_value)
    f.fail_key(key,
               std::to_string(v) + " exceeds the model's " + model_short + " (" + std::to_string(model_value) + ")");
  return v;
}

}  // namespace

void parse_data(Fields f, data::DataConfig& d, const models::ModelConfig& model) {
  d.kind = f.choice("kind", d.kind, {"synthetic", "shards"});
  d.vocab_size = model_sized(f, "vocab_size", kMinVocab, model.vocab_size, "vocab_size", "vocab");
  d.corpus_tokens = f.bounded("corpus_tokens", d.corpus_tokens, kMaxCorpusTokens, "a bound on memory and time");
  d.branching = f.bounded("branching", d.branching, kMaxVocab, "successors of a token: at most a vocabulary");
  d.seed = f.get<uint64_t>("seed", d.seed, "an unsigned integer");
  d.batch_size = f.bounded("batch_size", d.batch_size, kMaxBatchSize, "a bound on memory");
  d.seq_len = model_sized(f, "seq_len", 1, model.block_size, "block_size", "block_size");
  d.eval_fraction = f.num("eval_fraction", d.eval_fraction);
  if (!(d.eval_fraction > 0 && d.eval_fraction < 0.5)) f.fail_key("eval_fraction", "must be in (0, 0.5)");
  const int64_t seq = d.seq_len > 0 ? d.seq_len : model.block_size;
  if (d.batch_size * seq > kMaxBatchTokens)  // both bounded: no overflow
    f.fail_here("batch_size x seq_len = " + std::to_string(d.batch_size) + " x " + std::to_string(seq) + " = " +
                std::to_string(d.batch_size * seq) + " tokens a micro-batch, more than the limit of " +
                std::to_string(kMaxBatchTokens) + " (a bound on memory: the logits alone are tokens x vocab)");
  // the sampler's rule (data/corpus.cpp): the train and the eval split each hold more than seq_len + 1 tokens
  const int64_t split = static_cast<int64_t>(static_cast<double>(d.corpus_tokens) * (1.0 - d.eval_fraction));
  if (d.kind == "synthetic" && (split <= seq + 1 || d.corpus_tokens - split <= seq + 1))
    f.fail_key("corpus_tokens", std::to_string(d.corpus_tokens) + " tokens is too small for seq_len " +
                                    std::to_string(seq) + " with eval_fraction " + std::to_string(d.eval_fraction) +
                                    " (the train and the eval split each need more than seq_len + 1 tokens)");
  YAML::Node paths = f.raw("paths");
  if (paths.IsDefined() && !paths.IsNull()) {
    if (!paths.IsSequence()) f.fail(paths, "data.paths: expected a list of file paths");
    for (const auto& p : paths) d.paths.push_back(p.as<std::string>());
  }
  if (d.kind == "shards" && d.paths.empty()) f.fail_key("kind", "kind 'shards' needs data.paths");
  if (d.kind == "synthetic" && !d.paths.empty()) f.fail_key("paths", "only kind 'shards' reads paths");
  f.done();
}

}  // namespace ampcheck::scenario::parsing
