// The engine option train.fused_grad_check: kernels::square_sum_nonfinite (one pass: Σ x² and whether any element is
// inf or NaN) against float64 sums and isfinite — its ATen reference on the CPU, its CUDA kernel on a GPU — and whole
// training runs with the option against runs without it: the same skipped steps, loss scales and losses (the inf check
// the GradScaler records from the probe's pass decides as its own would), the norms within summation order.
#include "test_support.h"

#include "engine/trainer.h"
#include "kernels/fused.h"

#include <cmath>
#include <limits>

using namespace ampcheck;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double sum_sq64(const std::vector<at::Tensor>& ts) {
  double s = 0;
  for (const auto& t : ts) s += t.to(at::kDouble).square().sum().item<double>();
  return s;
}

// A mixed list: fp32, fp16 and bf16 tensors, sizes below, at and across the kernel's 16-byte vectors and 8192-element
// blocks, a view that starts off 16-byte alignment; n lists of it for more than one launch's 128 tensors.
std::vector<at::Tensor> mixed(const at::Device& dev, int copies) {
  std::vector<at::Tensor> ts;
  at::manual_seed(3);
  for (int c = 0; c < copies; ++c)
    for (int64_t n : {1, 7, 8, 9, 8191, 8192, 8193, 100003}) {
      ts.push_back(at::randn({n}).to(dev));
      ts.push_back((at::randn({n}) * 100).to(dev).to(at::kHalf));
      ts.push_back(at::randn({n}).to(dev).to(at::kBFloat16));
    }
  ts.push_back(at::randn({4097}).to(dev).narrow(0, 1, 4096));  // not 16-byte aligned
  return ts;
}

TEST(GradCheck, SquareSumNonfiniteContractOnTheCpu) {
  const auto ts = mixed(at::kCPU, 1);
  auto [s, found] = kernels::square_sum_nonfinite(ts);
  ASSERT_EQ(s.scalar_type(), at::kFloat);
  ASSERT_EQ(s.dim(), 0);
  // fp32 sums of fp32 squares: 1e-5 relative of the float64 sum
  EXPECT_NEAR(s.item<double>(), sum_sq64(ts), 1e-5 * sum_sq64(ts));
  EXPECT_EQ(found.item<double>(), 0.0);
  for (double bad : {kInf, -kInf, std::nan("")}) {
    auto broken = ts;
    broken[4] = broken[4].clone();
    broken[4].view(-1)[3] = bad;  // an fp16 tensor
    EXPECT_EQ(kernels::square_sum_nonfinite(broken).second.item<double>(), 1.0) << bad;
  }
  auto [s0, f0] = kernels::square_sum_nonfinite({});
  EXPECT_EQ(s0.item<double>(), 0.0);
  EXPECT_EQ(f0.item<double>(), 0.0);
  EXPECT_THROW(kernels::square_sum_nonfinite({at::ones({2}, at::kDouble)}), c10::Error);
}

// On a GPU: the kernel against float64 sums (1e-5 relative: fp32 squares and per-block fp32 sums), bit-identical on a
// second call (a fixed order), inf and NaN found in any dtype, and a finite sum beyond fp32's range inf with no element
// found non-finite (as fp32 sums of squares overflow).
TEST(CudaKernels, SquareSumNonfiniteMatchesFloat64) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "the CUDA kernels were not built (see doctor)";
  const at::Device cuda(at::kCUDA, 0);
  const auto ts = mixed(cuda, 6);  // 145 tensors of three dtypes: one launch per dtype, partials of all in one buffer
  std::vector<at::Tensor> many;    // 200 fp32 tensors: two launches of one dtype
  for (int i = 0; i < 200; ++i) many.push_back(at::randn({1000 + i}, at::TensorOptions().device(cuda)));
  const std::vector<at::Tensor>* lists[] = {&ts, &many};
  for (const auto* list : lists) {
    auto [s, found] = kernels::square_sum_nonfinite(*list);
    auto [s2, found2] = kernels::square_sum_nonfinite(*list);
    const double want = sum_sq64(*list);
    EXPECT_NEAR(s.item<double>(), want, 1e-5 * want);
    EXPECT_EQ(found.item<double>(), 0.0);
    EXPECT_TRUE(at::equal(s, s2)) << "deterministic";
    auto ref = kernels::square_sum_nonfinite(*list, kernels::Impl::Reference);
    EXPECT_NEAR(s.item<double>(), ref.first.item<double>(), 1e-5 * want);
  }
  for (size_t which : {size_t{0}, size_t{4}, size_t{5}, size_t{23}, ts.size() - 1})
    for (double bad : {kInf, std::nan("")}) {
      auto broken = ts;
      broken[which] = broken[which].clone();
      broken[which].view(-1)[broken[which].numel() - 1] = bad;  // the last element: a tail, or a block's end
      EXPECT_EQ(kernels::square_sum_nonfinite(broken).second.item<double>(), 1.0) << which << " " << bad;
    }
  auto [big, big_found] = kernels::square_sum_nonfinite({at::full({4}, 1e20, at::TensorOptions().device(cuda))});
  EXPECT_TRUE(std::isinf(big.item<double>()));
  EXPECT_EQ(big_found.item<double>(), 0.0);
}

// fp16 autocast with fused AdamW on the CPU, a NaN planted in the grads at step 4: with the option the GradScaler's
// check comes from the probe's pass — the same step skipped, the same loss scales, bit-identical losses (the step's
// arithmetic is untouched); grad and parameter norms within 1e-5 relative (another summation order). With clipping
// the scaler checks itself (unscale_ before the clip), and the option only changes the norms.
TEST(GradCheck, TrainingRunWithTheOptionSkipsAndScalesAsWithout) {
  for (bool clip : {false, true}) {
    engine::RunConfig a = ampcheck::testing::micro_run("fp16-autocast", 10);
    a.optimizer.fused = true;
    ampcheck::inject::add_injections(a, {ampcheck::testing::grad_injection(4, NAN, "wte", 3)});
    if (clip) a.loop.clip_max_norm = 1.0;
    engine::RunConfig b = a;
    b.loop.fused_grad_check = true;
    engine::Trainer ta(a, at::kCPU), tb(b, at::kCPU);
    ta.run();
    tb.run();
    ASSERT_NO_FATAL_FAILURE(ampcheck::testing::expect_same_run_but_norms(ta.trajectory(), tb.trajectory(), 10, 1e-5,
                                                                         clip ? "clip" : "no clip"));
    const auto& ra = ta.trajectory().rows;
    EXPECT_EQ(ra[4][trajectory::kSkipped], 1.0) << "the planted NaN must skip its step";
    EXPECT_EQ(ra[5][trajectory::kLossScale], ra[4][trajectory::kLossScale] * 0.5);
  }
}

}  // namespace
