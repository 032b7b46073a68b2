// FNV-1a 64 (Fowler–Noll–Vo), the one non-cryptographic hash of the harness: tensor digests (engine/digest.h), the
// reference key (reference/reference_store.h), the golden's checksum and the fleet's trajectory hash (validate/), the
// sweep's cache key (usecases/sweep.cpp). It tells runs and files apart; it does not stand against someone who crafts
// a collision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampcheck::io {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ULL;  // the offset basis: the hash of nothing
constexpr uint64_t kFnv1aPrime = 1099511628211ULL;

// h with n bytes folded in; fed piece by piece, the same as one call over the pieces in order.
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}
// The hash of the bytes of s.
inline uint64_t fnv1a(const std::string& s) { return fnv1a(kFnv1aOffset, s.data(), s.size()); }

}  // namespace ampcheck::io
