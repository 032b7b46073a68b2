// The fused head's tied path (models/head_loss.h: TiedGradient, tied_embedding) and its two kernels
// (kernels::embedding_backward_add_, kernels::scale_unless_one_). On the CPU the tied path runs the same ATen ops as
// autograd's stock sum of the two gradients, so it is compared bit for bit; on a GPU the CUDA kernel sums each
// token's rows in another (fixed) order, so it is compared within fp32 reordering error and for determinism.
#include "test_support.h"

#include "kernels/fused.h"
#include "models/head_loss.h"

#include <ampcheck/amp/autocast.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace ampcheck;

namespace {

struct TiedRun {
  at::Tensor loss, dw, dwpe;
  bool slot_empty = false;
};

// A lookup into the tied weight, a little arithmetic, the fused head over the same weight; backward at `scale` with
// the fused head told `hint` (ratio scale / hint reaches the saved gradients). Tokens repeat (token 3 a quarter of
// the positions) so the per-token sums have several rows.
TiedRun run_tied(bool tied, const at::Device& dev, at::ScalarType autocast_dtype, double scale, double hint) {
  at::manual_seed(11);
  const int64_t N = 96, C = 32, V = 80;
  at::Tensor w = (at::randn({V, C}) * 0.5).to(dev).requires_grad_(true);
  at::Tensor pe = (at::randn({N, C}) * 0.1).to(dev).requires_grad_(true);
  at::Tensor idx = at::randint(V, {N}, at::kLong);
  idx.narrow(0, 0, N / 4).fill_(3);
  idx = idx.index_select(0, at::randperm(N)).to(dev);
  at::Tensor t = at::randint(V, {N}, at::kLong).to(dev);
  models::TiedGradient slot;
  at::Tensor loss;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast_dtype != at::kFloat) ac.emplace(dev.type(), autocast_dtype);
    at::Tensor e = tied ? models::tied_embedding(w, idx, &slot) : at::embedding(w, idx);
    at::Tensor x = at::tanh(e + pe) * 1.5;
    loss = models::fused_head_cross_entropy(x, w, t, 32, at::full({}, hint, x.options().dtype(at::kFloat)), false, {},
                                            tied ? &slot : nullptr);
  }
  (loss * scale).backward();
  return {loss.detach(), w.grad(), pe.grad(), !slot.grad.defined()};
}

void expect_equal_bits(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(at::equal(a.cpu(), b.cpu())) << what << ": worst " << (a - b).abs().max().item<double>();
}

}  // namespace

// CPU, fp32 and bf16 autocast, ratio 1 and 4: the tied weight's gradient is the stock path's bit for bit (the same
// ATen ops: the head's gradient plus at::embedding_dense_backward), the other gradients too, and the slot is empty
// after backward.
TEST(TiedEmbedding, GivesTheStockGradientOnTheCpu) {
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (double hint : {4.0, 1.0}) {
      const auto stock = run_tied(false, at::kCPU, dt, 4.0, hint);
      const auto tied = run_tied(true, at::kCPU, dt, 4.0, hint);
      const std::string what = std::string(c10::toString(dt)) + " hint " + std::to_string(hint);
      expect_equal_bits(tied.loss, stock.loss, what + " loss");
      expect_equal_bits(tied.dw, stock.dw, what + " dw");
      expect_equal_bits(tied.dwpe, stock.dwpe, what + " dwpe");
      EXPECT_TRUE(tied.slot_empty) << what;
    }
}

// Bad shapes are refused with the function's name.
TEST(TiedEmbedding, BadInputIsRefused) {
  at::Tensor g = at::zeros({10, 8}), rows = at::ones({5, 8});
  EXPECT_THROW(kernels::embedding_backward_add_(g, rows, at::zeros({4}, at::kLong)), c10::Error);
  EXPECT_THROW(kernels::embedding_backward_add_(g, at::ones({5, 7}), at::zeros({5}, at::kLong)), c10::Error);
  at::Tensor x = at::ones({4});
  EXPECT_THROW(kernels::scale_unless_one_(x, at::ones({2})), c10::Error);
  EXPECT_THROW(models::tied_embedding(g, at::zeros({3}, at::kLong), nullptr), c10::Error);
}

// On a GPU: the kernels against the stock sum, GPT-2's width, a vocabulary of 50257: 16384 positions of which a
// quarter are one token (a long run) and the rest skewed towards low ids, and small cases at the block boundaries;
// within fp32 reordering error of the per-token sums (2^-16 of the sum of the magnitudes added into an element, plus
// 1e-30: a row left out of the 4096-row run is 2^-12 of it), and bit for bit the same in two runs (a fixed order).
TEST(CudaKernels, EmbeddingBackwardAddMatchesTheStockSum) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  at::manual_seed(13);
  const auto f32 = at::TensorOptions().device(at::kCUDA);
  const auto i64 = f32.dtype(at::kLong);
  struct Case {
    std::string name;
    at::Tensor idx;
  };
  const int64_t V = 50257;
  at::Tensor skewed = (at::rand({16384}, f32).pow(4) * V).to(at::kLong).clamp_max(V - 1);
  skewed.narrow(0, 0, 4096).fill_(50256);
  skewed = skewed.index_select(0, at::randperm(16384, i64));
  // the kernels' blocks hold 16 sorted positions: runs that fill blocks exactly, cross one boundary, end a row short
  const std::vector<Case> cases = {
      {"GPT-2 batch, skewed", skewed},
      {"one token, 48 positions", at::full({48}, 7, i64)},
      {"runs of 16, 17, 15", at::cat({at::full({16}, 3, i64), at::full({17}, 9, i64), at::full({15}, 2, i64)})
                                 .index_select(0, at::randperm(48, i64))},
      {"37 distinct", at::randperm(37, i64) * 100},
  };
  for (const auto& cs : cases) {
    const int64_t N = cs.idx.numel(), C = 768;
    at::Tensor rows = at::randn({N, C}, f32);
    at::Tensor base = at::randn({V, C}, f32);
    at::Tensor a = base.clone(), b = base.clone(), c = base.clone();
    kernels::embedding_backward_add_(a, rows, cs.idx, kernels::Impl::Auto);
    kernels::embedding_backward_add_(b, rows, cs.idx, kernels::Impl::Reference);
    kernels::embedding_backward_add_(c, rows, cs.idx, kernels::Impl::Auto);
    at::Tensor magnitude = base.abs();
    kernels::embedding_backward_add_(magnitude, rows.abs(), cs.idx, kernels::Impl::Reference);
    at::Tensor excess = (a - b).abs() - (magnitude * std::ldexp(1.0, -16) + 1e-30);
    EXPECT_LE(excess.max().item<double>(), 0.0) << cs.name;
    EXPECT_GT((a - base).abs().max().item<double>(), 0.0) << cs.name << ": nothing was added";
    expect_equal_bits(a, c, cs.name + ": two runs");
  }
}

// On a GPU: x *= r is x.mul_(r) bit for bit for fp32 / fp16 / bf16, aligned and not (a view one element in), and
// with r == 1 leaves x's bits as they were (NaN payloads included).
TEST(CudaKernels, ScaleUnlessOneIsMul) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  at::manual_seed(17);
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16})
    for (int64_t offset : {0, 1})
      for (double r : {1.0, 0.37, 65536.0}) {
        at::Tensor full = (at::randn({100003}, at::kCUDA) * 100).to(dt);
        full[17] = std::numeric_limits<double>::quiet_NaN();
        at::Tensor x = full.narrow(0, offset, 100003 - offset);
        at::Tensor want = x.clone();
        want.mul_(at::full({}, r, x.options().dtype(at::kFloat)));
        at::Tensor before = x.clone();
        at::Tensor rt = at::full({}, r, x.options().dtype(at::kFloat));
        kernels::scale_unless_one_(x, rt);
        const std::string what =
            std::string(c10::toString(dt)) + " offset " + std::to_string(offset) + " r " + std::to_string(r);
        const at::ScalarType bits = x.element_size() == 2 ? at::kShort : at::kInt;
        if (r == 1.0) {
          EXPECT_TRUE(at::equal(x.view(bits).cpu(), before.view(bits).cpu())) << what;
        } else {
          at::Tensor finite = want.isnan().logical_not();
          EXPECT_TRUE(at::equal(x.masked_select(finite).cpu(), want.masked_select(finite).cpu())) << what;
          EXPECT_TRUE(at::equal(x.isnan().cpu(), want.isnan().cpu())) << what;
        }
      }
}

// On a GPU under bf16 autocast: the tied path against autograd's sum — the loss and the position embedding's
// gradient bit for bit (the same kernels), the tied weight's gradient within fp32 reordering error (1e-6 relative).
TEST(CudaKernels, TiedHeadGivesTheStockGradient) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  for (double hint : {4.0, 1.0}) {
    const auto stock = run_tied(false, at::kCUDA, at::kBFloat16, 4.0, hint);
    const auto tied = run_tied(true, at::kCUDA, at::kBFloat16, 4.0, hint);
    expect_equal_bits(tied.loss, stock.loss, "loss");
    expect_equal_bits(tied.dwpe, stock.dwpe, "dwpe");
    const double rel = ((tied.dw - stock.dw).norm() / stock.dw.norm()).item<double>();
    EXPECT_LT(rel, 1e-6) << "hint " << hint;
    EXPECT_TRUE(tied.slot_empty);
  }
}
