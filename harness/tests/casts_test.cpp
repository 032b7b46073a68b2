// The one-pass casts (kernels::cast_many, kernels::widen_sum) and their uses on the fast path: model.gemm_epilogues'
// step weight casts (Gpt::cast_weights → linear_epilogues / mlp_gelu_epilogues / the fused head's precast weight),
// the fused head's chunk weight-gradient sum and fp16 weight gradients widened to fp32. Each claims bit-identity
// with the ATen op it replaces (a cast rounds to nearest even either way; a sum in fp32 in a fixed order is one
// value), so every comparison here is exact — tolerance zero, with the sign of zero as the one stated exception.
#include "test_support.h"

#include "kernels/fused.h"
#include "kernels/gemm_epilogues.h"
#include "models/head_loss.h"

#include <ampcheck/amp/autocast.h>

#include <limits>

using namespace ampcheck;

namespace {

// values that exercise rounding: ordinary, ties, the fp16 range ends (overflow to inf, subnormals, underflow to 0),
// bf16's, inf and NaN
at::Tensor awkward(int64_t n, const at::Device& dev, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor t = at::randn({n}) * at::pow(2.0, at::randint(-30, 30, {n}).to(at::kFloat));
  const float special[] = {0.f,
                           -0.f,
                           65504.f,
                           65520.f,
                           70000.f,
                           -70000.f,
                           6e-8f,
                           3e-8f,
                           1e-40f,
                           3.3895314e38f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           1.00048828125f /* an fp16 tie */,
                           1.00390625f /* a bf16 tie */};
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(std::size(special)); ++i) t[i * 7 % n] = special[i];
  return t.to(dev);
}

// equal bit for bit; NaN where the other is NaN (a NaN's payload is not specified: the GPU's fp32 add returns its
// canonical NaN, a widening keeps the bf16 payload)
void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const at::ScalarType bits = got.element_size() == 2 ? at::kShort : at::kInt;
  at::Tensor g = got.contiguous().cpu(), w = want.contiguous().cpu();
  at::Tensor gn = g.isnan(), wn = w.isnan();
  EXPECT_TRUE(at::equal(gn, wn)) << what << ": NaN at other places";
  EXPECT_TRUE(at::equal(at::where(gn, at::zeros_like(g), g).view(bits), at::where(wn, at::zeros_like(w), w).view(bits)))
      << what;
}

std::vector<at::Tensor> mixed_tensors(const at::Device& dev, int count) {
  // sizes 1 … large, odd ones (the scalar tail), a non-contiguous-storage slice start (an unaligned view)
  std::vector<at::Tensor> ts;
  const int64_t sizes[] = {1, 7, 8, 768, 2305, 3 * 768 * 8 + 3, 70001, 9, 4096 * 3 + 1};
  for (int i = 0; i < count; ++i) {
    const int64_t n = sizes[i % std::size(sizes)];
    at::Tensor t = awkward(n + 1, dev, 100 + i);
    ts.push_back(i % 5 == 4 ? t.narrow(0, 1, n) : t.narrow(0, 0, n).reshape({n}));  // every 5th starts 4 bytes in
  }
  ts.push_back(awkward(32 * 48, dev, 7).view({32, 48}));  // a matrix keeps its shape
  return ts;
}

void check_cast_many(const at::Device& dev) {
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (int count : {1, 9, 131}) {  // 131: more than one launch's kMaxCastTensors (128)
      const auto ts = mixed_tensors(dev, count);
      const auto got = kernels::cast_many(ts, dt);
      ASSERT_EQ(got.size(), ts.size());
      for (size_t i = 0; i < ts.size(); ++i)
        expect_same_bits(
            got[i], ts[i].to(dt),
            std::string(c10::toString(dt)) + " tensor " + std::to_string(i) + " of " + std::to_string(count));
    }
}

void check_widen_sum(const at::Device& dev) {
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (int parts : {1, 2, 4, 8})
      for (int64_t n : {int64_t{8}, int64_t{1000003}, int64_t{96 * 64}}) {
        std::vector<at::Tensor> ps;
        for (int k = 0; k < parts; ++k) ps.push_back((awkward(n, dev, 40 + k) * 1e-3).to(dt));
        at::Tensor want = at::zeros({n}, ps[0].options().dtype(at::kFloat));
        for (const auto& p : ps) want.add_(p);
        at::Tensor got = kernels::widen_sum(ps);
        // the one difference allowed: a zero's sign (0 + (-0) is +0 when starting from zeros; widen_sum starts from
        // the first part, keeping its -0): compare with the zeros made positive
        at::Tensor g = at::where(got == 0, at::zeros_like(got), got),
                   w = at::where(want == 0, at::zeros_like(want), want);
        expect_same_bits(
            g, w, std::string(c10::toString(dt)) + " parts " + std::to_string(parts) + " n " + std::to_string(n));
      }
}

bool cuda_kernels_here() { return at::hasCUDA() && kernels::cuda_kernels_built(); }

}  // namespace

// On the CPU (and wherever the kernels are not built) the references run: the same bits as ATen's .to / add_.
TEST(Casts, CastManyIsToOnTheCpu) { check_cast_many(at::kCPU); }
TEST(Casts, WidenSumIsSequentialAddsOnTheCpu) { check_widen_sum(at::kCPU); }

TEST(Casts, BadInputIsRefused) {
  at::Tensor a = at::ones({4}), b = at::ones({5});
  EXPECT_THROW(kernels::cast_many({a}, at::kFloat), c10::Error);
  EXPECT_THROW(kernels::widen_sum({a.to(at::kHalf), b.to(at::kHalf)}), c10::Error);
  EXPECT_THROW(kernels::widen_sum({}), c10::Error);
}

TEST(CudaKernels, CastManyMatchesTo) {
  if (!cuda_kernels_here()) GTEST_SKIP() << "no CUDA device, or the CUDA kernels not built (see doctor)";
  check_cast_many(at::Device(at::kCUDA));
}

TEST(CudaKernels, WidenSumMatchesSequentialAdds) {
  if (!cuda_kernels_here()) GTEST_SKIP() << "no CUDA device, or the CUDA kernels not built (see doctor)";
  check_widen_sum(at::Device(at::kCUDA));
}

namespace {
struct Step {
  std::vector<at::Tensor> outs;  // forward outputs, then every gradient
};

// a Linear, the MLP and the fused head through the GEMM-epilogue functions, with or without precast weights
Step epilogue_step(bool precast, at::ScalarType dt) {
  const at::Device dev(at::kCUDA);
  at::manual_seed(5);
  const auto o = at::TensorOptions().device(dev);
  const int64_t N = 256, C = 64, H = 256, V = 512;
  at::Tensor x = at::randn({N, C}, o).requires_grad_(true);
  at::Tensor w = (at::randn({C, C}, o) * 0.1).requires_grad_(true), b = (at::randn({C}, o) * 0.1).requires_grad_(true);
  at::Tensor w_fc = (at::randn({H, C}, o) * 0.1).requires_grad_(true),
             b_fc = (at::randn({H}, o) * 0.1).requires_grad_(true);
  at::Tensor w_pr = (at::randn({C, H}, o) * 0.05).requires_grad_(true),
             b_pr = (at::randn({C}, o) * 0.1).requires_grad_(true);
  at::Tensor wte = (at::randn({V, C}, o) * 0.02).requires_grad_(true);
  at::Tensor targets = at::randint(0, V, {N}, o.dtype(at::kLong));
  std::vector<at::Tensor> casts(6);
  if (precast)
    casts =
        kernels::cast_many({w.detach(), b.detach(), w_fc.detach(), b_fc.detach(), w_pr.detach(), b_pr.detach()}, dt);
  at::Tensor wte_cast = precast ? kernels::cast_many({wte.detach()}, dt)[0] : at::Tensor();
  at::Tensor y, m, loss;
  {
    amp::AutocastGuard ac(at::kCUDA, dt);
    y = kernels::linear_epilogues(x, w, b, kernels::Impl::Auto, casts[0], casts[1]);
    std::vector<at::Tensor> mc;
    if (precast) mc = {casts[2], casts[3], casts[4], casts[5]};
    m = kernels::mlp_gelu_epilogues(y, w_fc, b_fc, w_pr, b_pr, kernels::Impl::Auto, mc);
    loss = models::fused_head_cross_entropy(m.reshape({N, C}), wte, targets, /*chunk_rows=*/64, {}, /*fp32_wgrad=*/true,
                                            wte_cast);
  }
  loss.backward();
  return {{y.detach(), m.detach(), loss.detach(), x.grad(), w.grad(), b.grad(), w_fc.grad(), b_fc.grad(), w_pr.grad(),
           b_pr.grad(), wte.grad()}};
}
}  // namespace

// The step's weights precast in one pass give the forward and every gradient the per-op casts give, bit for bit.
TEST(CudaKernels, PrecastWeightsGiveTheSameStep) {
  if (!cuda_kernels_here() || !kernels::gemm_epilogues_built())
    GTEST_SKIP() << "no CUDA device, or the CUDA kernels / cuBLASLt not built (see doctor)";
  at::globalContext().setDeterministicAlgorithms(true, false);  // one cuBLASLt algorithm for both runs
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const Step a = epilogue_step(false, dt), b = epilogue_step(true, dt);
    ASSERT_EQ(a.outs.size(), b.outs.size());
    for (size_t i = 0; i < a.outs.size(); ++i)
      expect_same_bits(b.outs[i], a.outs[i],
                       std::string(c10::toString(dt)) + " output / gradient " + std::to_string(i));
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
}
