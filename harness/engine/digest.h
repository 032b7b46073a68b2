// Tensor digests for bitwise validation (`ampcheck validate`): a 64-bit FNV-1a hash of a tensor's dtype, shape and
// bytes. Two tensors with the same digest are (up to a 2^-64 collision) bit for bit the same; the digest of every
// parameter and gradient after each step lets a comparison name the first tensor that differs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ampcheck::engine {

// The tensor's digest (a host copy is hashed: a sync on a device tensor). An undefined tensor (a grad never written)
// digests to 0.
uint64_t tensor_digest(const at::Tensor& t);
// One digest of several (FNV-1a over their bytes, in order): a step's parameters and gradients as one number. The
// first starts from FNV-1a's offset basis, the second from `seed` (another digest: the two folded into one).
uint64_t combine_digests(const std::vector<uint64_t>& digests);
uint64_t combine_digests(const std::vector<uint64_t>& digests, uint64_t seed);

}  // namespace ampcheck::engine
