// Strict YAML -> Scenario. A Fields object wraps one mapping, hands out typed values by key, remembers which keys
// were read, and at the end rejects the rest by name, with the closest known key as a hint.
#include "scenario/scenario.h"

#include "inject/injection.h"
#include "io/text.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

namespace ampcheck::scenario {

namespace {

std::string where(const std::string& file, const YAML::Node& n) {
  if (!n.IsDefined()) return file;  // a missing key has no position
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

class Fields {
 public:
  Fields(const YAML::Node& node, std::string file, std::string path)
      : node_(node), file_(std::move(file)), path_(std::move(path)) {
    if (!node_.IsMap()) fail(node_, "expected a mapping");
  }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw ScenarioError(where(file_, n) + ": " + (path_.empty() ? "(top level)" : path_) + ": " + what);
  }
  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const {
    const YAML::Node n = has(key) ? at(key) : node_;  // a missing key is reported at its mapping
    fail_at(n, key, what);
  }
  // An error at node n (a list element) for the field `field` of this mapping ("steps[1]", "betas[0]").
  [[noreturn]] void fail_at(const YAML::Node& n, const std::string& field, const std::string& what) const {
    throw ScenarioError(where(file_, n) + ": " + sub(field) + ": " + what);
  }
  YAML::Node at(const std::string& key) const { return static_cast<const YAML::Node&>(node_)[key]; }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const {
    const YAML::Node n = at(key);
    return n.IsDefined() && !n.IsNull();
  }
  const std::string& file() const { return file_; }

  template <typename T>
  T get(const std::string& key, T fallback, const char* type_name) {
    seen_.insert(key);
    if (!has(key)) return fallback;
    const YAML::Node n = at(key);
    if (!n.IsScalar())
      fail_key(key, std::string("expected ") + type_name + ", got a " + (n.IsMap() ? "mapping" : "list"));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail_key(key, std::string("expected ") + type_name + ", got '" + n.Scalar() + "'");
    }
  }
  // A finite number: YAML's .inf / .nan are refused wherever a number is an amount (lr, scales, factors, floors).
  double num(const std::string& key, double d) {
    const double v = get<double>(key, d, "a number");
    if (!std::isfinite(v)) fail_key(key, "expected a finite number, got '" + at(key).Scalar() + "'");
    return v;
  }
  // The same for a list element n of field `field` (betas[0]); integer() likewise (steps[2]).
  double num_at(const YAML::Node& n, const std::string& field) const {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v))
      fail_at(n, field, "expected a number, got " + describe(n));
    if (!std::isfinite(v)) fail_at(n, field, "expected a finite number, got '" + n.Scalar() + "'");
    return v;
  }
  int64_t integer_at(const YAML::Node& n, const std::string& field) const {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v))
      fail_at(n, field, "expected an integer, got " + describe(n));
    return v;
  }
  static std::string describe(const YAML::Node& n) {
    return n.IsScalar() ? "'" + n.Scalar() + "'" : n.IsMap() ? "a mapping" : n.IsSequence() ? "a list" : "nothing";
  }
  int64_t integer(const std::string& key, int64_t d) { return get<int64_t>(key, d, "an integer"); }
  bool boolean(const std::string& key, bool d) { return get<bool>(key, d, "true or false"); }
  // Text as reports and the terminal show it: a control character a YAML escape spelled ("\e", "\x9b") becomes \xNN
  // (io::printable_text; the file itself is UTF-8, checked before parsing).
  std::string str(const std::string& key, const std::string& d) {
    return io::printable_text(get<std::string>(key, d, "a string"));
  }
  std::string choice(const std::string& key, const std::string& d, const std::vector<std::string>& allowed) {
    std::string v = str(key, d);
    for (const auto& a : allowed)
      if (a == v) return v;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail_key(key, "'" + v + "' is not one of: " + list);
  }
  int64_t positive(const std::string& key, int64_t d) {
    int64_t v = integer(key, d);
    if (v <= 0) fail_key(key, "must be > 0, got " + std::to_string(v));
    return v;
  }
  // A positive integer with an upper bound: what keeps a scenario's time and memory finite (resource limits on input).
  // A value past int64 is refused naming the range, never wrapped.
  int64_t bounded(const std::string& key, int64_t d, int64_t most, const std::string& why) {
    if (has(key) && !fits_int64(at(key)))
      fail_key(key,
               "expected an integer from 1 to " + std::to_string(most) + " (" + why + "), got " + describe(at(key)));
    const int64_t v = positive(key, d);
    if (v > most) fail_key(key, "must be at most " + std::to_string(most) + " (" + why + "), got " + std::to_string(v));
    return v;
  }
  // An integer from `least` to `most` (`most_text` names it where it is another field's: "the model's block_size
  // (32)"), or 0 where `zero` says what 0 means ("the preset's"). Out of range, or past int64 (refused, never wrapped),
  // the message names the range and why it is there.
  int64_t ranged(const std::string& key, int64_t d, int64_t least, int64_t most, const std::string& why,
                 const std::string& zero = "", const std::string& most_text = "") {
    seen_.insert(key);
    if (!has(key)) return d;
    const YAML::Node n = at(key);
    int64_t v = 0;
    const bool integer = n.IsScalar() && YAML::convert<int64_t>::decode(n, v);
    if (integer && ((v >= least && v <= most) || (!zero.empty() && v == 0))) return v;
    fail_key(key,
             range_text(least, most, why, zero, most_text) + ", got " + (integer ? std::to_string(v) : describe(n)));
  }
  static std::string range_text(int64_t least, int64_t most, const std::string& why, const std::string& zero = "",
                                const std::string& most_text = "") {
    return "expected " + (zero.empty() ? std::string() : "0 (" + zero + ") or ") + "an integer from " +
           std::to_string(least) + " to " + (most_text.empty() ? std::to_string(most) : most_text) +
           (why.empty() ? std::string() : " (" + why + ")");
  }
  static bool fits_int64(const YAML::Node& n) {
    int64_t v = 0;
    return n.IsScalar() && YAML::convert<int64_t>::decode(n, v);
  }
  // A finite number in (0, most]: seconds, MiB (what a run later multiplies and casts to an integer)
  double positive_amount(const std::string& key, double d, double most, const std::string& unit) {
    const double v = num(key, d);
    if (!(v > 0 && v <= most)) {
      char got[64];
      std::snprintf(got, sizeof got, "%g", v);
      fail_key(key, "must be in (0, " + std::to_string(static_cast<int64_t>(most)) + "] " + unit + ", got " + got);
    }
    return v;
  }
  // An error at this mapping itself ("model: 824,693,522,432 parameters ...")
  [[noreturn]] void fail_here(const std::string& what) const { fail(node_, what); }
  Fields map(const std::string& key) {
    seen_.insert(key);
    return Fields(at(key), file_, sub(key));
  }
  YAML::Node raw(const std::string& key) {
    seen_.insert(key);
    return at(key);
  }
  void done() const {
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (seen_.count(k)) continue;
      std::string known;
      for (const auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
      throw ScenarioError(where(file_, kv.first) + ": " + sub(k) + ": unknown key (known here: " + known + ")");
    }
  }

 private:
  YAML::Node node_;
  std::string file_, path_;
  std::set<std::string> seen_;
};

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
  return out + "; HINT: a module's name is its parameters' prefix: h.1.attn.c_proj owns h.1.attn.c_proj.weight";
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
  if (keep.IsDefined() && !keep.IsNull() && m.kind == "llama")  // module_tree() knows gpt and mlp only
    f.fail(keep, "model.keep_fp32: not available for kind llama yet (the per-module policy covers gpt and mlp)");
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

void parse_strategy(Fields& top, engine::Strategy& s) {
  YAML::Node n = top.raw("strategy");
  if (!n.IsDefined() || n.IsNull()) top.fail(n, "strategy: required (one of: fp32, tf32, fp16-autocast, ...)");
  auto preset = [&](const std::string& name, const YAML::Node& at) {
    try {
      return engine::strategy_preset(name);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(where(top.file(), at) + ": strategy: " + e.what());
    }
  };
  if (n.IsScalar()) {
    s = preset(n.Scalar(), n);
    return;
  }
  Fields f(n, top.file(), "strategy");
  s = preset(f.str("preset", "fp32"), n);
  auto dtype = [&](const std::string& key, at::ScalarType d) {
    std::string v = f.str(key, engine::dtype_name(d));
    try {
      return engine::parse_dtype(v);
    } catch (const std::invalid_argument& e) {
      f.fail_key(key, e.what());
    }
  };
  s.param_dtype = dtype("params", s.param_dtype);
  std::string ac = f.str("autocast", s.autocast ? engine::dtype_name(*s.autocast) : "off");
  if (ac == "off" || ac == "none") s.autocast.reset();
  else {
    try {
      s.autocast = engine::parse_dtype(ac);
    } catch (const std::invalid_argument& e) {
      f.fail_key("autocast", e.what());
    }
  }
  if (s.autocast == at::kFloat) f.fail_key("autocast", "autocast dtype must be fp16, bf16 or off");
  if (f.has("scaler")) {
    Fields sc = f.map("scaler");
    std::string kind = sc.choice("kind",
                                 s.scaler.kind == engine::ScalerKind::Dynamic  ? "dynamic"
                                 : s.scaler.kind == engine::ScalerKind::Static ? "static"
                                                                               : "none",
                                 {"none", "static", "dynamic"});
    s.scaler.kind = kind == "dynamic"  ? engine::ScalerKind::Dynamic
                    : kind == "static" ? engine::ScalerKind::Static
                                       : engine::ScalerKind::None;
    s.scaler.init_scale = sc.num("init_scale", s.scaler.init_scale);
    s.scaler.growth_factor = sc.num("growth_factor", s.scaler.growth_factor);
    s.scaler.backoff_factor = sc.num("backoff_factor", s.scaler.backoff_factor);
    s.scaler.growth_interval = sc.positive("growth_interval", s.scaler.growth_interval);
    if (!(s.scaler.init_scale > 0)) sc.fail_key("init_scale", "must be > 0");
    if (!(s.scaler.growth_factor > 1)) sc.fail_key("growth_factor", "must be > 1.0 (as PyTorch's GradScaler)");
    if (!(s.scaler.backoff_factor < 1)) sc.fail_key("backoff_factor", "must be < 1.0 (as PyTorch's GradScaler)");
    sc.done();
  } else {
    f.raw("scaler");
  }
  if (f.has("fp8")) {
    Fields e = f.map("fp8");
    engine::Fp8Config c = s.fp8.value_or(engine::Fp8Config{});
    const std::string scaling =
        e.choice("scaling", engine::fp8_scaling_name(c.scaling), {"current", "delayed", "none"});
    c.scaling = scaling == "delayed" ? engine::Fp8Scaling::Delayed
                : scaling == "none"  ? engine::Fp8Scaling::None
                                     : engine::Fp8Scaling::Current;
    c.hybrid = e.choice("grads", c.hybrid ? "e5m2" : "e4m3", {"e5m2", "e4m3"}) == "e5m2";
    c.history = e.bounded("history", c.history, kMaxFp8History, "a bound on memory: an amax buffer per cast");
    c.margin = e.integer("margin", c.margin);
    if (c.margin < 0 || c.margin > 16) e.fail_key("margin", "expected 0..16 (the scale is divided by 2^margin)");
    c.layers = e.choice("layers", c.layers, {"blocks", "blocks+head", "all"});
    e.done();
    s.fp8 = c;
    if (!s.autocast) s.autocast = at::kBFloat16;
    // the variant names itself, so reports group runs by what they ran (fp8-delayed-h16-e4m3grads, ...)
    std::string name = c.scaling == engine::Fp8Scaling::Delayed ? "fp8-delayed"
                       : c.scaling == engine::Fp8Scaling::None  ? "fp8-unscaled"
                                                                : "fp8";
    if (c.scaling == engine::Fp8Scaling::Delayed && c.history != 16) name += "-h" + std::to_string(c.history);
    if (c.margin != 0) name += "-m" + std::to_string(c.margin);
    if (!c.hybrid) name += "-e4m3grads";
    if (c.layers != "blocks") name += c.layers == "all" ? "-all" : "-head";
    s.name = name;
  } else {
    f.raw("fp8");
  }
  s.master_weights = f.boolean("master_weights", s.master_weights);
  s.tf32 = f.boolean("tf32", s.tf32);
  s.deterministic = f.boolean("deterministic", s.deterministic);
  if (s.master_weights && s.param_dtype == at::kFloat) f.fail_key("master_weights", "needs params fp16 or bf16");
  if (s.fp8 && s.autocast != at::kBFloat16)
    f.fail_key("autocast", "FP8 matmuls run beside bf16 autocast: expected bf16");
  if (s.fp8 && s.param_dtype != at::kFloat)
    f.fail_key("params", "FP8 keeps fp32 parameters as the master weights: expected fp32");
  f.done();
}

// The model's parameter names, to check injection globs against, listed without building it (a gpt2-124m is 500 MB
// of weights, an mlp within the bounds up to 8 GB).
std::vector<std::string> model_parameter_names(const models::ModelConfig& m) {
  const models::ModelConfig resolved = models::resolve_preset(m);
  if (resolved.kind == "gpt") return models::Gpt::parameter_names(resolved);
  if (resolved.kind == "llama") return models::Llama::parameter_names(resolved);
  return models::Mlp::parameter_names(resolved);
}

// "gpt micro has 28: wte, wpe, h.0.ln_1.weight, ..., ln_f.bias": enough names to write a glob from.
std::string some_names(const models::ModelConfig& m, const std::vector<std::string>& names) {
  std::string out = m.kind + " " + m.preset + " has " + std::to_string(names.size()) + ":";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i == 6 && names.size() > 8) {
      out += " ...,";
      i = names.size() - 2;
    }
    out += " " + names[i] + (i + 1 < names.size() ? "," : "");
  }
  return out;
}

void parse_injections(Fields& top, const engine::RunConfig& run, std::vector<inject::InjectionConfig>& out) {
  YAML::Node list = top.raw("inject");
  if (!list.IsDefined() || list.IsNull()) return;
  if (!list.IsSequence()) top.fail(list, "inject: expected a list of injections");
  const int64_t steps = run.loop.steps;
  const std::string step_range = "expected 0 <= step < train.steps (" + std::to_string(steps) + "), got ";
  std::vector<std::string> param_names;  // computed on the first grad injection
  for (size_t i = 0; i < list.size(); ++i) {
    Fields f(list[i], top.file(), "inject[" + std::to_string(i) + "]");
    // `params`: a glob that must match a parameter of the model
    auto params_glob = [&](Fields& fields) {
      const std::string glob = fields.str("params", "*");
      if (param_names.empty()) param_names = model_parameter_names(run.model);
      bool matched = false;
      for (const auto& name : param_names) matched = matched || inject::glob_match(glob, name);
      if (!matched)
        fields.fail_key("params", "'" + glob + "' matches no parameter of the model (expected a glob over its names; " +
                                      some_names(models::resolve_preset(run.model), param_names) + ")");
      return glob;
    };
    inject::InjectionConfig c;
    const std::string kind =
        f.choice("kind", "", {"grad", "activation", "underflow", "nan_loss", "bitflip", "scale_weights"});
    c.kind = kind == "grad"            ? inject::InjectionKind::GradValue
             : kind == "activation"    ? inject::InjectionKind::ActivationScale
             : kind == "underflow"     ? inject::InjectionKind::LossScale
             : kind == "bitflip"       ? inject::InjectionKind::BitFlip
             : kind == "scale_weights" ? inject::InjectionKind::ScaleWeights
                                       : inject::InjectionKind::NanLoss;
    if (c.kind == inject::InjectionKind::ScaleWeights) {  // at initialisation: no steps
      const models::ModelConfig m = models::resolve_preset(run.model);
      if (m.kind == "llama") f.fail_key("kind", "scale_weights is not available for kind llama yet (gpt and mlp)");
      const std::vector<models::ModuleInfo> tree = models::module_tree(m);
      if (!f.has("module")) f.fail(list[i], "module: required for kind scale_weights (" + some_modules(m, tree) + ")");
      c.module = f.str("module", "");
      if (models::module_index(tree, c.module) < 0)
        f.fail_key("module", "'" + c.module + "' is not a module of the model (" + some_modules(m, tree) + ")");
      if (!f.has("factor")) f.fail(list[i], "factor: required for kind scale_weights");
      c.factor = f.num("factor", 1.0);
      if (c.factor == 0) f.fail_key("factor", "must be finite and non-zero");
      f.done();
      out.push_back(c);
      continue;
    }
    YAML::Node steps_node = f.raw("steps");
    if (f.has("from")) {
      c.from_step = f.integer("from", -1);
      if (c.from_step < 0 || c.from_step >= steps) f.fail_key("from", step_range + std::to_string(c.from_step));
    } else {
      f.raw("from");
    }
    if (steps_node.IsDefined() && !steps_node.IsNull()) {
      if (!steps_node.IsSequence()) f.fail_key("steps", "expected a list of step numbers");
      for (size_t j = 0; j < steps_node.size(); ++j) {
        const std::string field = "steps[" + std::to_string(j) + "]";
        const int64_t step = f.integer_at(steps_node[j], field);
        if (step < 0 || step >= steps) f.fail_at(steps_node[j], field, step_range + std::to_string(step));
        c.steps.push_back(step);
      }
    }
    if (c.steps.empty() && c.from_step < 0) f.fail(list[i], "needs steps: [..] and/or from: N (every step from N on)");
    if (c.kind == inject::InjectionKind::BitFlip) {  // one bit of one element: which tensor, element and bit
      c.flip_param = f.choice("target", "grad", {"grad", "param"}) == "param";
      c.params = params_glob(f);
      c.element = f.integer("element", 0);
      if (c.element < 0) f.fail_key("element", "must be >= 0");
      c.bit = f.integer("bit", 0);
      if (c.bit < 0 || c.bit > 63) f.fail_key("bit", "expected 0..63 (the element's size bounds it at run time)");
    }
    if (c.kind == inject::InjectionKind::GradValue) {
      std::string v = f.str("value", "inf");  // the one number that may be non-finite: it is the planted event
      if (v == "inf") c.value = INFINITY;
      else if (v == "-inf")
        c.value = -INFINITY;
      else if (v == "nan")
        c.value = NAN;
      else {
        try {
          c.value = std::stod(v);
        } catch (...) {
          f.fail_key("value", "expected inf, -inf, nan or a number, got '" + v + "'");
        }
      }
      c.params = params_glob(f);
      c.count = f.positive("count", 1);
    }
    if (c.kind == inject::InjectionKind::ActivationScale || c.kind == inject::InjectionKind::LossScale) {
      if (!f.has("factor")) f.fail(list[i], "factor: required for kind " + kind);
      c.factor = f.num("factor", 1.0);
      if (c.factor == 0) f.fail_key("factor", "must be finite and non-zero");
      if (c.kind == inject::InjectionKind::LossScale) c.compensate = f.boolean("compensate", true);
    }
    if (c.kind == inject::InjectionKind::ActivationScale) {
      const models::ModelConfig m = models::resolve_preset(run.model);
      c.block = f.integer("block", 0);
      if (c.block < 0 || c.block >= m.n_layer)
        f.fail_key("block", "expected 0 <= block < the model's " + std::to_string(m.n_layer) +
                                " blocks (n_layer), got " + std::to_string(c.block));
      const std::string at = f.choice("at", "residual", {"residual", "mlp_input", "mlp_input_spike"});
      c.at = at == "mlp_input"         ? models::ActivationSite::MlpInput
             : at == "mlp_input_spike" ? models::ActivationSite::MlpInputSpike
                                       : models::ActivationSite::Residual;
      if (c.at != models::ActivationSite::Residual && m.kind == "mlp")
        f.fail_key("at", at + " is a site of the gpt's and llama's blocks; the mlp model has only residual");
    }
    c.rank = f.integer("rank", -1);
    if (c.rank >= 0 && !run.distributed.enabled) f.fail_key("rank", "only for a data-parallel scenario (distributed:)");
    if (c.rank < -1 || c.rank >= run.distributed.world_size)
      f.fail_key("rank", "expected 0 <= rank < distributed.world_size (" + std::to_string(run.distributed.world_size) +
                             "), got " + std::to_string(c.rank));
    f.done();
    out.push_back(c);
  }
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

}  // namespace

namespace {

// A scenario is YAML, which is UTF-8 text: a byte that is not (a Latin-1 'é' saved by an old editor) is refused
// before parsing, naming the line, the column and the field the line sets, never carried into a report.
void check_utf8(const std::string& text, const std::string& path) {
  const size_t bad = io::first_invalid_utf8(text);
  if (bad == std::string::npos) return;
  const size_t begin = text.rfind('\n', bad) == std::string::npos ? 0 : text.rfind('\n', bad) + 1;
  const std::string line = text.substr(begin, text.find('\n', bad) - begin);
  const size_t key_begin = line.find_first_not_of(" -");
  const size_t colon = line.find(':');
  std::string field;
  if (key_begin != std::string::npos && colon != std::string::npos && colon > key_begin && begin + colon < bad)
    field = line.substr(key_begin, colon - key_begin);
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[bad]));
  throw ScenarioError(path + ":" + io::line_and_column(text, bad) + ": " + (field.empty() ? "" : field + ": ") +
                      "byte " + hex + " is not UTF-8 (the line reads '" + line +
                      "'); a scenario is YAML, which is "
                      "UTF-8 text. HINT: save the file as UTF-8 (iconv -f latin1 -t utf-8)");
}

Scenario parse_scenario_text(const std::string& text, const std::string& path) {
  check_utf8(text, path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own limit on nesting (its message is "bad file")
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                        ": nested too deeply (more than yaml-cpp's " + std::to_string(e.depth()) +
                        " parser levels); a scenario is a few levels deep");
  } catch (const YAML::ParserException& e) {
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                        ": YAML syntax error: " + e.msg);
  }
  Scenario sc;
  sc.path = path;
  sc.text = text;
  Fields top(root, path, "");
  sc.run.name = top.str("name", "");
  if (sc.run.name.empty()) top.fail(root, "name: required");
  // the name names the scenario's result files in the run directory (<name>.h5): a plain file name only
  const bool plain =
      sc.run.name != "." && sc.run.name != ".." && std::none_of(sc.run.name.begin(), sc.run.name.end(), [](char ch) {
        return ch == '/' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20;
      });
  if (!plain)
    top.fail_key("name", "'" + sc.run.name +
                             "' is not a plain file name (expected no '/', '\\' or control "
                             "characters, not '.' or '..'): it names the scenario's files in the run directory");
  if (sc.run.name.size() > kMaxNameBytes)
    top.fail_key("name", std::to_string(sc.run.name.size()) + " bytes, longer than the limit of " +
                             std::to_string(kMaxNameBytes) +
                             " (it names the scenario's files, <name>.h5 and their "
                             "temporaries <name>.h5.tmp.<pid>, which must fit the file system's 255). HINT: shorten "
                             "it; `why:` is the place for a sentence");
  sc.why = top.str("why", "");
  if (sc.why.empty()) top.fail(root, "why: required (one sentence: what this scenario shows)");
  sc.device = top.choice("device", "auto", {"auto", "cpu", "cuda"});
  sc.run.seed = top.get<uint64_t>("seed", sc.run.seed, "an unsigned integer");
  if (top.has("model")) parse_model(top.map("model"), sc.run.model);
  else
    top.raw("model");
  if (top.has("data")) parse_data(top.map("data"), sc.run.data, models::resolve_preset(sc.run.model));
  else
    top.raw("data");
  if (top.has("optimizer")) parse_optimizer(top.map("optimizer"), sc.run.optimizer);
  else
    top.raw("optimizer");
  if (top.has("schedule")) parse_schedule(top.map("schedule"), sc.run.schedule);
  else
    top.raw("schedule");
  if (top.has("train")) parse_loop(top.map("train"), sc.run.loop);
  else
    top.raw("train");
  parse_strategy(top, sc.run.strategy);
  if (top.has("distributed")) parse_distributed(top.map("distributed"), sc.run);
  else
    top.raw("distributed");
  std::vector<inject::InjectionConfig> injections;
  parse_injections(top, sc.run, injections);
  inject::set_injections(sc.run, std::move(injections));
  sc.tolerance = verdict::default_tolerance();
  if (top.has("tolerance")) {
    Fields t = top.map("tolerance");
    sc.tolerance.k = t.num("k", sc.tolerance.k);
    sc.tolerance.window = t.bounded("window", sc.tolerance.window, kMaxSteps, "steps: as train.steps");
    sc.tolerance.ratio_floor = t.num("ratio_floor", sc.tolerance.ratio_floor);
    sc.tolerance.fraction_floor = t.num("fraction_floor", sc.tolerance.fraction_floor);
    sc.tolerance.max_skipped_fraction = t.num("max_skipped_fraction", sc.tolerance.max_skipped_fraction);
    sc.tolerance.fp8_saturated_floor = t.num("fp8_saturated_floor", sc.tolerance.fp8_saturated_floor);
    sc.tolerance.fp8_flushed_floor = t.num("fp8_flushed_floor", sc.tolerance.fp8_flushed_floor);
    if (!(sc.tolerance.fp8_saturated_floor > 0 && sc.tolerance.fp8_saturated_floor < 1))
      t.fail_key("fp8_saturated_floor", "must be in (0, 1)");
    if (!(sc.tolerance.fp8_flushed_floor > 0 && sc.tolerance.fp8_flushed_floor < 1))
      t.fail_key("fp8_flushed_floor", "must be in (0, 1)");
    if (!(sc.tolerance.k > 0)) t.fail_key("k", "must be > 0");
    if (!(sc.tolerance.ratio_floor > 1)) t.fail_key("ratio_floor", "must be > 1 (a ratio such as 1.05)");
    if (!(sc.tolerance.fraction_floor > 0 && sc.tolerance.fraction_floor < 1))
      t.fail_key("fraction_floor", "must be in (0, 1)");
    if (!(sc.tolerance.max_skipped_fraction >= 0 && sc.tolerance.max_skipped_fraction <= 1))
      t.fail_key("max_skipped_fraction", "must be in [0, 1]");
    t.done();
  } else {
    top.raw("tolerance");
  }
  if (top.has("expect")) {
    Fields e = top.map("expect");
    sc.expect.verdict = e.choice("verdict", verdict::to_string(verdict::Kind::Tracks), verdict::kind_words());
    sc.expect.error = e.str("error", "");
    YAML::Node skipped = e.raw("skipped");
    if (skipped.IsDefined() && !skipped.IsNull()) {
      if (!skipped.IsSequence() || skipped.size() != 2)
        e.fail(skipped, "expect.skipped: expected [min, max] skipped steps");
      sc.expect.skipped_min = skipped[0].as<int64_t>();
      sc.expect.skipped_max = skipped[1].as<int64_t>();
    }
    YAML::Node warnings = e.raw("warnings");
    if (warnings.IsDefined() && !warnings.IsNull()) {
      const std::set<std::string> known = {"zero_grads",  "subnormal_grads", "fp8_saturated",
                                           "fp8_flushed", "not_judged",      "precision"};
      if (!warnings.IsSequence()) e.fail(warnings, "expect.warnings: expected a list of warning signals");
      for (size_t j = 0; j < warnings.size(); ++j) {
        const std::string field = "warnings[" + std::to_string(j) + "]";
        if (!warnings[j].IsScalar() || !known.count(warnings[j].Scalar()))
          e.fail_at(warnings[j], field,
                    "expected one of zero_grads, subnormal_grads, fp8_saturated, fp8_flushed, "
                    "not_judged, precision, got " +
                        Fields::describe(warnings[j]));
        sc.expect.warnings.push_back(warnings[j].Scalar());
      }
    }
    if (verdict::is(sc.expect.verdict, verdict::Kind::Error) && sc.expect.error.empty())
      e.fail_key("verdict", "verdict 'error' needs expect.error: the message");
    if (!verdict::is(sc.expect.verdict, verdict::Kind::Error) && !sc.expect.error.empty())
      e.fail_key("error", "only verdict 'error' takes a message");
    e.done();
  } else {
    top.raw("expect");
  }
  // cross-field checks
  if (sc.run.loop.unscale_each_micro_batch && sc.run.strategy.scaler.kind == engine::ScalerKind::None)
    top.fail(root, "train.unscale_each_micro_batch: needs a loss scaler (strategy.scaler)");
  if (sc.run.optimizer.fused && sc.run.optimizer.kind != "adamw") top.fail(root, "optimizer.fused: only adamw");
  if (sc.run.strategy.fp8) {  // at::_scaled_mm: every matmul dimension a multiple of 16
    const models::ModelConfig m = models::resolve_preset(sc.run.model);
    if (m.kind == "mlp")
      top.fail(root, "strategy.fp8: FP8 matmuls are sites of the gpt and llama models; the mlp has none");
    const int64_t seq = sc.run.data.seq_len > 0 ? sc.run.data.seq_len : m.block_size;
    const int64_t rows = sc.run.data.batch_size * seq / std::max<int64_t>(1, sc.run.distributed.world_size);
    const bool head = sc.run.strategy.fp8->layers != "blocks";
    if (head && m.head_loss != models::HeadLoss::Stock)
      top.fail(root, "model.head_loss: " + std::string(models::head_loss_name(m.head_loss)) +
                         " computes the LM head itself; strategy.fp8.layers " + sc.run.strategy.fp8->layers +
                         " puts it in FP8 (use layers: blocks, or head_loss: stock)");
    const bool llama = m.kind == "llama";  // its k/v_proj are n_kv_head x head size wide, its MLP mlp_hidden
    const int64_t kv = llama ? m.n_kv_head * (m.n_embd / m.n_head) : 16, hidden = llama ? m.mlp_hidden : 16;
    if (m.n_embd % 16 != 0 || rows % 16 != 0 || (head && m.vocab_size % 16 != 0) || kv % 16 != 0 || hidden % 16 != 0)
      top.fail(root,
               "strategy.fp8: at::_scaled_mm needs every matmul dimension to be a multiple of 16: n_embd " +
                   std::to_string(m.n_embd) + ", batch x seq_len per rank " + std::to_string(rows) +
                   (head ? ", vocab " + std::to_string(m.vocab_size) : std::string()) +
                   (llama ? ", n_kv_head x head size " + std::to_string(kv) + ", mlp_hidden " + std::to_string(hidden)
                          : std::string()));
  }
  top.done();
  return sc;
}

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& path) {
  try {
    return parse_scenario_text(text, path);
  } catch (const ScenarioError& e) {  // a message may quote a value or key of the file: printable (io/text.h)
    if (io::first_unprintable(e.what()) == std::string::npos) throw;
    throw ScenarioError(io::printable_text(e.what()));
  } catch (const YAML::Exception& e) {  // a value yaml-cpp cannot convert where the fields read it (e.g. in a list)
    throw ScenarioError(io::printable_text(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                                           std::to_string(e.mark.column + 1) +
                                           ": a value of the wrong type (yaml-cpp: " + e.msg + ")"));
  }
}

verdict::Expectation expectation(const Expect& e) {
  verdict::Expectation x;
  x.verdict = e.verdict;
  x.error = e.error;
  x.skipped_min = e.skipped_min;
  x.skipped_max = e.skipped_max;
  x.warnings = e.warnings;
  return x;
}

Scenario load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": cannot open scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_scenario(ss.str(), path);
}

std::vector<std::string> load_suite(const std::string& scenarios_dir, const std::string& suite) {
  const std::string path = scenarios_dir + "/suites/" + suite + ".yaml";
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": no such suite '" + suite + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(ss.str());
  } catch (const YAML::Exception& e) {
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  Fields f(root, path, "");
  f.str("why", "");
  YAML::Node list = f.raw("scenarios");
  if (!list.IsSequence()) f.fail(root, "scenarios: expected a list of scenario files");
  std::vector<std::string> out;
  for (const auto& s : list) out.push_back(scenarios_dir + "/" + s.as<std::string>());
  f.done();
  return out;
}

}  // namespace ampcheck::scenario
