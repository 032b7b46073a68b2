// Small helpers the fused kernels share: conversions between the storage dtypes and fp32, vector loads and stores,
// a warp sum; on the host, the dispatch on a DType and the alignment check.
#pragma once

#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace ampcheck::kernels::cuda {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);  // round to nearest even
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

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

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Programmatic dependent launch (PDL, sm_90 and later). The project's kernels are launched by `launch` below with
// the programmatic-stream-serialization attribute, so the GPU may schedule one while the kernel before it in the stream
// (or in the captured CUDA graph) is still draining, instead of after it has finished and a launch gap has passed.
// Every kernel's first statement is pdl_begin(): griddepcontrol.wait returns only once the kernel before it has
// completed and its writes are visible, so nothing is read or written earlier than without the attribute — the same
// values, in the same order —; then griddepcontrol.launch_dependents lets the next such kernel be scheduled (its own
// wait still holds it until this one has completed). Launched without the attribute (GPUs before sm_90,
// AMPCHECK_PDL=0) both instructions return at once; compiled for sm_80 they are left out.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Host side: launches `kernel` on `stream` as <<<grid, block, smem, stream>>> would, with the PDL attribute where
// pdl_enabled() (kernels_cuda.h: compute capability 9.0 or later, and the environment variable AMPCHECK_PDL is not
// "0"). The kernel must start with pdl_begin(). Errors are left for cudaGetLastError(), as with <<<>>>.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Host side: calls f with a value of the storage type that `t` names.
template <typename F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); break;
    case DType::Float16: f(__half{}); break;
    case DType::BFloat16: f(__nv_bfloat16{}); break;
  }
}

// Host side: whether a pointer allows the 16-byte vector loads / stores.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace ampcheck::kernels::cuda
