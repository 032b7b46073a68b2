// Data: the synthetic source is deterministic and learnable in principle (entropy rate well below ln V), batches
// depend only on (seed, step, micro), and the shard reader handles nanoGPT raw uint16 and llm.c headed shards and
// names the file in every error.
#include "data/corpus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

using namespace ampcheck::data;

namespace {
std::string tmp(const std::string& stem) { return ::testing::TempDir() + "/ampcheck_data_" + stem + ".bin"; }

DataConfig cfg(int64_t B, int64_t T) {
  DataConfig c;
  c.batch_size = B;
  c.seq_len = T;
  return c;
}
}  // namespace

TEST(DataSynthetic, SameSeedSameTokensDifferentSeedDifferentTokens) {
  auto a = TokenCorpus::synthetic(256, 10000, 4, 1), b = TokenCorpus::synthetic(256, 10000, 4, 1);
  auto c = TokenCorpus::synthetic(256, 10000, 4, 2);
  EXPECT_EQ(a.tokens(), b.tokens());
  EXPECT_NE(a.tokens(), c.tokens());
}

TEST(DataSynthetic, EntropyRateIsFarBelowLnVocab) {
  auto a = TokenCorpus::synthetic(256, 1000, 4, 1);
  EXPECT_LT(a.entropy_rate(), 0.25 * std::log(256.0));
  // each token has at most `branching` distinct successors
  std::vector<std::set<int>> succ(256);
  for (size_t i = 0; i + 1 < a.tokens().size(); ++i) succ[a.tokens()[i]].insert(a.tokens()[i + 1]);
  for (int t = 0; t < 256; ++t) ASSERT_LE(succ[t].size(), 4u) << "token " << t;
}

TEST(DataSampler, BatchDependsOnlyOnStepAndMicro) {
  auto corpus = TokenCorpus::synthetic(256, 50000, 4, 3);
  BatchSampler s(corpus, cfg(4, 16), at::Device(at::kCPU));
  Batch a = s.train_batch(7, 1);
  s.train_batch(3);  // order of calls must not matter
  Batch b = s.train_batch(7, 1);
  EXPECT_TRUE(at::equal(a.inputs, b.inputs));
  EXPECT_FALSE(at::equal(a.inputs, s.train_batch(8, 1).inputs));
  EXPECT_FALSE(at::equal(a.inputs, s.train_batch(7, 0).inputs));
  EXPECT_EQ(a.inputs.sizes(), (std::vector<int64_t>{4, 16}));
  // targets are the inputs shifted by one token
  EXPECT_TRUE(at::equal(a.inputs.slice(1, 1), a.targets.slice(1, 0, 15)));
}

TEST(DataShards, ReadsRawUint16AndLlmcHeadedShards) {
  std::vector<uint16_t> toks = {1, 2, 3, 4, 5, 6, 7};
  {
    std::ofstream raw(tmp("raw"), std::ios::binary);
    raw.write(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
    std::ofstream headed(tmp("headed"), std::ios::binary);
    int32_t header[256] = {20240520, 1, static_cast<int32_t>(toks.size())};
    headed.write(reinterpret_cast<const char*>(header), sizeof(header));
    headed.write(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
  }
  EXPECT_EQ(TokenCorpus::from_shards({tmp("raw")}, 50304).tokens(), toks);
  EXPECT_EQ(TokenCorpus::from_shards({tmp("headed")}, 50304).tokens(), toks);
  EXPECT_EQ(TokenCorpus::from_shards({tmp("raw"), tmp("headed")}, 50304).size(), 14);
}

TEST(DataShards, TokenOutsideTheVocabIsAnErrorNamingTheFile) {
  std::vector<uint16_t> toks = {1, 300, 2};
  {
    std::ofstream raw(tmp("big"), std::ios::binary);
    raw.write(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
  }
  try {
    TokenCorpus::from_shards({tmp("big")}, 256);
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(tmp("big")), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 300 at index 1"), std::string::npos) << msg;
  }
}

TEST(DataShards, MissingFileIsAnErrorNamingIt) {
  EXPECT_THROW(TokenCorpus::from_shards({"/nonexistent/x.bin"}, 256), std::runtime_error);
}
