// Scenario — one YAML file under scenarios/: a RunConfig (model, data, optimizer, schedule, training loop, strategy,
// injections) plus `why:` (one sentence) and `expect:` (the verdict and, for `error`, the message). Parsing is
// strict: an unknown key, a wrong type or an impossible combination is a ScenarioError naming file:line:column and
// the field path (e.g. "scenarios/x.yaml:7:3: optimizer.lr: expected a number, got 'fast'").
#pragma once

#include "engine/run_config.h"
#include "verdict/kind.h"
#include "verdict/pass_rule.h"
#include "verdict/verdict.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace ampcheck::scenario {

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Expect {
  std::string verdict = verdict::to_string(verdict::Kind::Tracks);  // verdict/kind.h: tracks | diverges | ...
  std::string error;                           // for `error`: the exact message the engine must raise
  int64_t skipped_min = -1, skipped_max = -1;  // optional bounds on the skipped steps (-1: none)
  // warnings the run must raise (verdict::Warning::signal: zero_grads, subnormal_grads, fp8_saturated, fp8_flushed,
  // not_judged, precision): a planted event whose only trace is a diagnostic. Under --strict, a warning not listed
  // here fails the scenario.
  std::vector<std::string> warnings;
};
// The expectation as the pass rule (verdict/pass_rule.h) takes it: the error message always compared (the parser
// requires one exactly for verdict `error`).
verdict::Expectation expectation(const Expect& e);

struct Scenario {
  std::string path;  // file it came from
  std::string text;  // the file's text (stored in every result file)
  std::string why;
  std::string device = "auto";  // auto | cpu | cuda
  engine::RunConfig run;
  Expect expect;
  verdict::Tolerance tolerance;  // the strategy's default, overridden field by field by `tolerance:`
};

// The longest `name:` in bytes: the name names the scenario's files (<name>.h5, <name>.h5.tmp.<pid>, <name>.ranks),
// which then stay well within the 255 bytes a file name may have.
constexpr size_t kMaxNameBytes = 128;

// Bounds on every number that sizes a run (resource limits on input: scenarios/README.md "Bounds" says why each is
// where it is). A value outside its range — negative, past the bound, past int64 — is a ScenarioError naming the file,
// the field and the range, before anything is built or trained.
// The model (each dimension; 0 = the preset's):
constexpr int64_t kMaxLayers = 256;       // n_layer: build time is per layer; deeper than any published transformer
constexpr int64_t kMaxWidth = 16384;      // n_embd: Llama 3 405B's width
constexpr int64_t kMaxHeads = 1024;       // n_head, n_kv_head: 8x the widest published (128); n_embd bounds them too
constexpr int64_t kMaxHidden = 65536;     // mlp_hidden: 4 x kMaxWidth (GPT's MLP ratio)
constexpr int64_t kMaxVocab = 65536;      // vocab_size: tokens are uint16 (the corpus, nanoGPT / llm.c shards)
constexpr int64_t kMinVocab = 2;          // the synthetic Markov source needs two tokens
constexpr int64_t kMaxBlockSize = 65536;  // block_size: 64x GPT-2's; the eager attention holds T x T scores
// The whole model: parameters counted from the resolved dimensions (models::parameter_count) before it is built.
// 2e9 fp32 weights are 8 GB, initialised on the CPU in ~30 s; 5x the largest preset (gpt2-350m).
constexpr int64_t kMaxParameters = 2'000'000'000;
// The data and the loop:
constexpr int64_t kMaxBatchSize = 1 << 20;     // data.batch_size (rows of one micro-batch)
constexpr int64_t kMaxBatchTokens = 1 << 24;   // data.batch_size x seq_len: one micro-batch's tokens
constexpr int64_t kMaxCorpusTokens = 1 << 28;  // data.corpus_tokens: 512 MiB of uint16, generated in seconds
constexpr int64_t kMaxSteps = 10'000'000;      // train.steps (as the command line's --steps): a row per step
constexpr int64_t kMaxMicroBatches = 65'536;   // train.micro_batches
constexpr int64_t kMaxEvalBatches = 1024;      // train.eval_batches: forwards per evaluation
constexpr int64_t kMaxFp8History = 1024;       // strategy.fp8.history: Transformer Engine's longest default
constexpr int64_t kMaxWorldSize = 1024;        // distributed.world_size: processes started, or a job's ranks
constexpr double kMaxTimeoutSeconds = 86'400;  // distributed.timeout_s (as --fleet-timeout): one day
constexpr double kMaxBucketMiB = 65'536;       // distributed.bucket_mb: 64 GiB, past any device's memory

Scenario load_scenario(const std::string& path);
Scenario parse_scenario(const std::string& text, const std::string& path);  // path only for messages

// Suites: scenarios/suites/<name>.yaml = {why: ..., scenarios: [relative paths]}.
std::vector<std::string> load_suite(const std::string& scenarios_dir, const std::string& suite);

}  // namespace ampcheck::scenario
