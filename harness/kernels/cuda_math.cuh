// Small helpers the fused kernels share: conversions between the storage dtypes and fp32, vector loads and stores,
// a warp sum; on the host, the dispatch on a DType and the alignment check.
#pragma once

#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ampcheck::kernels::cuda {

template <typename T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T from_f(float v);  // round to nearest even
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// V consecutive elements as one aligned load / store (the caller guarantees alignment to V · sizeof(T)), widened to
// fp32 / rounded from fp32.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ void load_f(const T* p, float (&out)[V]) {
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f(pk.v[i]);
}
template <typename T, int V>
__device__ __forceinline__ void store_f(T* p, const float (&in)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int i = 0; i < V; ++i) pk.v[i] = from_f<T>(in[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

// Multi-tensor launches (casts.cu, square_sums.cu, adamw.cu): tensor t owns blocks [first_block[t], first_block[t +
// 1]); the tensor of block b — the last t < count with first_block[t] <= b — by binary search.
__device__ __forceinline__ int tensor_of_block(const int* first_block, int count, int b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= b) lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Host side: calls f with a value of the storage type that `t` names.
template <typename F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      f(float{});
      break;
    case DType::Float16:
      f(__half{});
      break;
    case DType::BFloat16:
      f(__nv_bfloat16{});
      break;
  }
}

// Host side: whether a pointer allows the 16-byte vector loads / stores.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace ampcheck::kernels::cuda
