// Tests for AutocastGuard, the RAII twin of Python's `with torch.autocast(device_type, dtype):`. It must switch
// autocast on (or off) with the given dtype for its device type only, restore the previous enabled flag and dtype on
// exit -- in nested use and when an exception unwinds -- and, like torch.autocast.__exit__, clear the autocast
// weight-cast cache when the outermost region ends (but not when an inner one does). The cache is observed through
// its effect: inside one region a float32 leaf weight is cast to bfloat16 once and reused, so an in-place change to
// the weight is not seen until the cache is cleared.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ampcheck/amp/autocast.h>
#include <gtest/gtest.h>

#include <stdexcept>

namespace ampcheck::amp {
namespace {

struct AutocastState {
  bool enabled;
  at::ScalarType dtype;
  bool operator==(const AutocastState& o) const { return enabled == o.enabled && dtype == o.dtype; }
};
std::ostream& operator<<(std::ostream& os, const AutocastState& s) {
  return os << (s.enabled ? "enabled" : "disabled") << " dtype " << s.dtype;
}
AutocastState State(c10::DeviceType d) {
  return {at::autocast::is_autocast_enabled(d), at::autocast::get_autocast_dtype(d)};
}

// Every test starts and must end with autocast off on the CPU (the process default).
class Autocast : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "leaked autocast state"; }
  void TearDown() override { EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "autocast left enabled"; }
};

TEST_F(Autocast, GuardEnablesAndRestoresStateWhenNested) {
  const AutocastState cpu0 = State(at::kCPU), cuda0 = State(at::kCUDA);
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    EXPECT_EQ(State(at::kCPU), (AutocastState{true, at::kBFloat16})) << "inside the outer guard";
    EXPECT_EQ(State(at::kCUDA), cuda0) << "another device type's state must not change";
    {
      AutocastGuard inner(at::kCPU, at::kHalf, /*enabled=*/false);
      EXPECT_EQ(State(at::kCPU), (AutocastState{false, at::kHalf})) << "inside the disabling inner guard";
    }
    EXPECT_EQ(State(at::kCPU), (AutocastState{true, at::kBFloat16})) << "after the inner guard";
  }
  EXPECT_EQ(State(at::kCPU), cpu0) << "after the outer guard";
}

TEST_F(Autocast, GuardRestoresStateWhenAnExceptionUnwinds) {
  const AutocastState before = State(at::kCPU);
  try {
    AutocastGuard guard(at::kCPU, at::kBFloat16);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(State(at::kCPU), before);
  EXPECT_EQ(at::autocast::increment_nesting(), 1) << "the nesting count must be back to 0";
  at::autocast::decrement_nesting();
}

TEST_F(Autocast, GuardRestoresCudaStateWithoutTouchingCpu) {
  const AutocastState cpu0 = State(at::kCPU), cuda0 = State(at::kCUDA);
  {
    AutocastGuard guard(at::kCUDA, at::kBFloat16);  // only thread-local state: no CUDA device needed
    EXPECT_EQ(State(at::kCUDA), (AutocastState{true, at::kBFloat16}));
    EXPECT_EQ(State(at::kCPU), cpu0);
  }
  EXPECT_EQ(State(at::kCUDA), cuda0);
}

TEST_F(Autocast, MatmulRunsInTheGuardsDtypeOnlyInsideIt) {
  const at::Tensor a = at::ones({4, 4}), b = at::ones({4, 4});
  {
    AutocastGuard guard(at::kCPU, at::kBFloat16);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16) << "mm is a lower-precision op under CPU autocast";
  }
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat) << "after the guard";
}

// x @ w with w a float32 leaf requiring grad: autocast caches its bfloat16 copy for the region.
TEST_F(Autocast, OutermostExitClearsTheWeightCastCacheInnerExitDoesNot) {
  ASSERT_TRUE(at::autocast::is_autocast_cache_enabled());
  const at::Tensor x = at::ones({2, 4});
  at::Tensor w = at::ones({4, 3}).set_requires_grad(true);
  auto product = [&] { return at::mm(x, w).to(at::kFloat); };
  auto double_w = [&] {
    at::NoGradGuard no_grad;
    w.mul_(2);
  };
  // All values are small integers, exact in bfloat16, so each product is exactly 4 * (current w value).
  const at::Tensor fresh1 = at::full({2, 3}, 4.0), fresh2 = at::full({2, 3}, 8.0), fresh4 = at::full({2, 3}, 16.0);
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    ASSERT_TRUE(at::equal(product(), fresh1)) << "first product";
    double_w();
    EXPECT_TRUE(at::equal(product(), fresh1)) << "same region: the cached bfloat16 weight is reused (stale)";
    {
      AutocastGuard inner(at::kCPU, at::kBFloat16);
      EXPECT_TRUE(at::equal(product(), fresh1)) << "nested region shares the cache";
    }
    EXPECT_TRUE(at::equal(product(), fresh1)) << "an inner exit must not clear the cache";
  }
  {
    AutocastGuard again(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(at::equal(product(), fresh2)) << "after the outermost exit the cast is redone";
    double_w();
  }
  {
    AutocastGuard again(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(at::equal(product(), fresh4)) << "and again after the next region";
  }
}

}  // namespace
}  // namespace ampcheck::amp
