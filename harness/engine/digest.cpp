#include "engine/digest.h"

namespace ampcheck::engine {

namespace {
constexpr uint64_t kFnvOffset = 1469598103934665603ULL, kFnvPrime = 1099511628211ULL;
uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}
}  // namespace

uint64_t tensor_digest(const at::Tensor& t) {
  if (!t.defined()) return 0;
  const at::Tensor host = t.detach().to(at::kCPU).contiguous();
  uint64_t h = kFnvOffset;
  const int64_t dtype = static_cast<int64_t>(host.scalar_type());
  h = fnv1a(h, reinterpret_cast<const unsigned char*>(&dtype), sizeof dtype);
  for (int64_t d : host.sizes()) h = fnv1a(h, reinterpret_cast<const unsigned char*>(&d), sizeof d);
  return fnv1a(h, static_cast<const unsigned char*>(host.data_ptr()), host.numel() * host.element_size());
}

uint64_t combine_digests(const std::vector<uint64_t>& digests, uint64_t seed) {
  return fnv1a(seed, reinterpret_cast<const unsigned char*>(digests.data()), digests.size() * sizeof(uint64_t));
}

}  // namespace ampcheck::engine
