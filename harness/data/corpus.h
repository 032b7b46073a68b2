// Token data for language-model training: a corpus of uint16 tokens (synthetic or read from nanoGPT-style shards)
// and a sampler whose batch for step s depends only on (seed, s) — so a resumed run sees exactly the batches an
// uninterrupted one would, and CPU and GPU runs see the same data.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::data {

struct DataConfig {
  std::string kind = "synthetic";  // synthetic | shards
  // synthetic: a random Markov source with `branching` likely successors per (previous two tokens) context
  int64_t vocab_size = 0;  // 0 = the model's vocab
  int64_t corpus_tokens = 1 << 20;
  int64_t branching = 4;
  uint64_t seed = 42;       // corpus and sampling seed
  uint64_t order_seed = 0;  // sampling order only (0 = seed): the references' data-order noise run sets it, so
                            // the same corpus is visited in another order; not a scenario field
  // shards: nanoGPT train.bin (raw uint16) or llm.c shards (256 x int32 header, magic 20240520, then uint16)
  std::vector<std::string> paths;
  // batches
  int64_t batch_size = 8;      // B, per micro-batch
  int64_t seq_len = 0;         // T, 0 = the model's block size
  double eval_fraction = 0.1;  // tail of the corpus held out for eval loss
};

struct Batch {
  at::Tensor inputs;   // (B, T) int64
  at::Tensor targets;  // (B, T) int64
};

class TokenCorpus {
 public:
  // Generates the synthetic corpus deterministically from cfg.seed.
  static TokenCorpus synthetic(int64_t vocab_size, int64_t n_tokens, int64_t branching, uint64_t seed);
  // Reads shards (whole files). Throws with the file name on a bad header or a token >= vocab_size.
  static TokenCorpus from_shards(const std::vector<std::string>& paths, int64_t vocab_size);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<uint16_t>& tokens() const { return tokens_; }
  // Entropy rate of the source in nats/token when known (synthetic), else NaN: the best achievable loss.
  double entropy_rate() const { return entropy_rate_; }

 private:
  std::vector<uint16_t> tokens_;
  double entropy_rate_ = NAN;
};

class BatchSampler {
 public:
  // Copies the corpus to `device` once; train windows come from [0, split), eval windows from [split, end).
  BatchSampler(const TokenCorpus& corpus, const DataConfig& cfg, at::Device device);
  // Deterministic in (seed, step, micro): the micro-th micro-batch of optimizer step `step`. Sample i of a step's
  // global batch (i = micro × batch_size + b) is the same window whatever the split: M micro-batches of B/M hold the
  // samples one batch of B holds (the accumulation invariance test relies on it), as ranks' shards do.
  Batch train_batch(int64_t step, int64_t micro = 0) const;
  // The i-th fixed eval batch.
  Batch eval_batch(int64_t i) const;
  int64_t batch_size() const { return B_; }
  // Data parallel: train_batch returns rows [rank*B/count, (rank+1)*B/count) of the global batch of B rows.
  void set_shard(int64_t rank, int64_t count);
  int64_t seq_len() const { return T_; }

 private:
  Batch gather(const std::vector<int64_t>& offsets) const;
  at::Tensor corpus_;  // (N,) int64 on device
  int64_t B_, T_, split_, n_;
  uint64_t seed_;       // training-batch order
  uint64_t eval_seed_;  // eval batches (never reordered)
  int64_t shard_rank_ = 0, shard_count_ = 1;
};

// splitmix64: the stateless hash behind every sampled offset.
uint64_t mix64(uint64_t x);

}  // namespace ampcheck::data
