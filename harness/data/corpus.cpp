// TokenCorpus and BatchSampler.
#include "data/corpus.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace ampcheck::data {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// ---------------------------------------------------------------------------------------------------------------
// Synthetic source: a first-order Markov chain. Each token has `branching` successors drawn once (by hash) from the
// vocabulary, taken with fixed probabilities p_k ∝ 2^-k. A model that learns the table reaches the entropy rate
// H = -Σ p_k ln p_k (1.08 nats for branching 4), far below ln(V) (5.5 nats for V = 256); with V contexts a ~1M
// model learns most of it in a few hundred steps.
TokenCorpus TokenCorpus::synthetic(int64_t vocab_size, int64_t n_tokens, int64_t branching, uint64_t seed) {
  if (vocab_size < 2 || vocab_size > 65536)
    throw std::invalid_argument("synthetic data: vocab_size must be in [2, 65536]");
  if (branching < 1) throw std::invalid_argument("synthetic data: branching must be >= 1");
  std::vector<double> probs(branching);
  double z = 0;
  for (int64_t k = 0; k < branching; ++k) z += (probs[k] = std::ldexp(1.0, -static_cast<int>(k)));
  double entropy = 0;
  for (auto& p : probs) {
    p /= z;
    entropy -= p * std::log(p);
  }
  std::vector<double> cdf(branching);
  double acc = 0;
  for (int64_t k = 0; k < branching; ++k) cdf[k] = (acc += probs[k]);

  TokenCorpus c;
  c.entropy_rate_ = entropy;
  c.tokens_.resize(n_tokens);
  std::mt19937_64 rng(seed);
  uint64_t b = rng() % vocab_size;  // the previous token
  const uint64_t table_seed = mix64(seed ^ 0x5eedULL);
  for (int64_t i = 0; i < n_tokens; ++i) {
    double u = std::generate_canonical<double, 53>(rng);
    int64_t k = 0;
    while (k + 1 < branching && u > cdf[k]) ++k;
    // successor k of context (a, b): a hash, so the table needs no memory
    uint64_t next = mix64(table_seed ^ (b * 0x100000001b3ULL + static_cast<uint64_t>(k))) % vocab_size;
    c.tokens_[i] = static_cast<uint16_t>(next);
    b = next;
  }
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
TokenCorpus TokenCorpus::from_shards(const std::vector<std::string>& paths, int64_t vocab_size) {
  if (paths.empty()) throw std::invalid_argument("shards: no paths given");
  TokenCorpus c;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error(path + ": cannot open token shard");
    const auto bytes = static_cast<int64_t>(in.tellg());
    in.seekg(0);
    int64_t offset = 0, count = bytes / 2;
    if (bytes >= 1024) {
      int32_t header[256];
      in.read(reinterpret_cast<char*>(header), sizeof(header));
      if (header[0] == 20240520) {  // llm.c shard: magic, version, token count
        if (header[1] != 1)
          throw std::runtime_error(path + ": llm.c shard version " + std::to_string(header[1]) + ", expected 1");
        offset = 1024;
        count = header[2];
        if (offset + 2 * count != bytes)
          throw std::runtime_error(path + ": header says " + std::to_string(count) + " tokens but the file holds " +
                                   std::to_string((bytes - offset) / 2));
      }
    }
    if (offset == 0 && bytes % 2 != 0) throw std::runtime_error(path + ": odd byte count; expected raw uint16 tokens");
    in.seekg(offset);
    const size_t start = c.tokens_.size();
    c.tokens_.resize(start + count);
    in.read(reinterpret_cast<char*>(c.tokens_.data() + start), 2 * count);
    if (!in) throw std::runtime_error(path + ": short read");
    for (int64_t i = 0; i < count; ++i)
      if (c.tokens_[start + i] >= vocab_size)
        throw std::runtime_error(path + ": token " + std::to_string(c.tokens_[start + i]) + " at index " +
                                 std::to_string(i) + " is >= the model's vocab_size " + std::to_string(vocab_size) +
                                 ". HINT: use a model preset with a larger vocab");
  }
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
BatchSampler::BatchSampler(const TokenCorpus& corpus, const DataConfig& cfg, at::Device device)
    : B_(cfg.batch_size),
      T_(cfg.seq_len),
      seed_(cfg.order_seed != 0 ? cfg.order_seed : cfg.seed),
      eval_seed_(cfg.seed) {
  n_ = corpus.size();
  split_ = static_cast<int64_t>(static_cast<double>(n_) * (1.0 - cfg.eval_fraction));
  if (split_ <= T_ + 1 || (cfg.eval_fraction > 0 && n_ - split_ <= T_ + 1))
    throw std::invalid_argument("data: corpus of " + std::to_string(n_) + " tokens is too small for seq_len " +
                                std::to_string(T_) + " with eval_fraction " + std::to_string(cfg.eval_fraction));
  at::Tensor host = at::from_blob(const_cast<uint16_t*>(corpus.tokens().data()), {n_}, at::kUInt16).to(at::kLong);
  corpus_ = host.to(device);
}

Batch BatchSampler::gather(const std::vector<int64_t>& offsets) const {
  at::Tensor off = at::tensor(offsets, at::kLong);
  // CUDA: pinned memory + non_blocking keeps this copy from becoming a host-device sync point every step.
  if (corpus_.is_cuda()) off = off.pin_memory().to(corpus_.device(), /*non_blocking=*/true);
  at::Tensor idx = off.unsqueeze(1) + at::arange(T_ + 1, corpus_.options());  // (B, T+1)
  at::Tensor window = corpus_.index_select(0, idx.reshape({-1})).view({static_cast<int64_t>(offsets.size()), T_ + 1});
  return {window.slice(1, 0, T_).contiguous(), window.slice(1, 1, T_ + 1).contiguous()};
}

void BatchSampler::set_shard(int64_t rank, int64_t count) {
  if (count < 1 || rank < 0 || rank >= count || B_ % count != 0)
    throw std::invalid_argument("batch of " + std::to_string(B_) + " rows cannot be split into " +
                                std::to_string(count) + " equal slices (rank " + std::to_string(rank) + ")");
  shard_rank_ = rank;
  shard_count_ = count;
}

Batch BatchSampler::train_batch(int64_t step, int64_t micro) const {
  const int64_t local = B_ / shard_count_, first = shard_rank_ * local;
  std::vector<int64_t> offsets(local);
  const uint64_t range = static_cast<uint64_t>(split_ - T_ - 1);
  for (int64_t b = first; b < first + local; ++b)
    offsets[b - first] = static_cast<int64_t>(
        mix64(mix64(mix64(seed_) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(micro * B_ + b)) % range);
  return gather(offsets);
}

Batch BatchSampler::eval_batch(int64_t i) const {
  std::vector<int64_t> offsets(B_);
  const uint64_t range = static_cast<uint64_t>(n_ - split_ - T_ - 1);
  for (int64_t b = 0; b < B_; ++b)
    offsets[b] = split_ + static_cast<int64_t>(mix64(mix64(eval_seed_ ^ 0xe7a1ULL) ^ (i * 1000003 + b)) % range);
  return gather(offsets);
}

}  // namespace ampcheck::data
