#include "engine/digest.h"

#include "io/fnv1a.h"

namespace ampcheck::engine {

uint64_t tensor_digest(const at::Tensor& t) {
  if (!t.defined()) return 0;
  const at::Tensor host = t.detach().to(at::kCPU).contiguous();
  uint64_t h = io::kFnv1aOffset;
  const int64_t dtype = static_cast<int64_t>(host.scalar_type());
  h = io::fnv1a(h, &dtype, sizeof dtype);
  for (int64_t d : host.sizes()) h = io::fnv1a(h, &d, sizeof d);
  return io::fnv1a(h, host.data_ptr(), host.numel() * host.element_size());
}

uint64_t combine_digests(const std::vector<uint64_t>& digests) { return combine_digests(digests, io::kFnv1aOffset); }

uint64_t combine_digests(const std::vector<uint64_t>& digests, uint64_t seed) {
  return io::fnv1a(seed, digests.data(), digests.size() * sizeof(uint64_t));
}

}  // namespace ampcheck::engine
