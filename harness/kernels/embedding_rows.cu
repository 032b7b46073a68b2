// The tied token embedding's backward and the fused head's gradient scaling (kernels/head.h:
// embedding_backward_add_, scale_unless_one_):
//   embedding_rows_add: grad[id] += Σ rows[n] over the positions n holding token id, given the positions sorted by
//     token (a stable sort: within a token, in position order). Two kernels: blocks of 16 sorted positions sum their
//     rows token by token in position order (float4 per thread, fp32); a token wholly inside a block is added to
//     grad there, one that runs on past a block's end leaves its block sums in scratch, and the second kernel's block
//     where such a token starts adds its sums in block order and the total to grad. Every order is fixed
//     (deterministic) and a frequent token's rows are summed by many blocks at once.
//   scale_unless_one: x *= *r (r rounded to x's dtype, the product in fp32 rounded once: x.mul_(r)) unless that r is 1,
//     in which case every block
//     returns before touching x: on the fused head's normal path (grad / hint == 1) the step pays no pass.
// Plain CUDA C++; head.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kChunk = 16;  // sorted positions per block of the first kernel

// sorted[s - 1] == id etc. for positions in range
__device__ __forceinline__ bool same(const int32_t* sorted, int64_t j, int64_t N, int32_t id) {
  return j >= 0 && j < N && sorted[j] == id;
}

// a += b, element by element
__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// grad's row `id` (C4 float4s), element c: += v
__device__ __forceinline__ void add_to_row(float* grad, int64_t id, int C4, int c, const float4& v) {
  float4* g = reinterpret_cast<float4*>(grad + id * (int64_t{C4} * 4)) + c;
  float4 gv = *g;
  add4(gv, v);
  *g = gv;
}

// Each block sums the rows of its kChunk sorted positions, token by token, in position order (one float4 of C per
// thread). A token whose positions all lie inside the chunk is added to grad here; the chunk's first and last token,
// where their positions continue into the neighbouring chunk, leave their sums in first_part / last_part instead.
__global__ void embedding_chunks_kernel(const int32_t* __restrict__ sorted, const int64_t* __restrict__ order,
                                        const float* __restrict__ rows, float* __restrict__ grad,
                                        float4* __restrict__ first_part, float4* __restrict__ last_part, int64_t N,
                                        int C4, int64_t V) {
  const int c = threadIdx.x;
  if (c >= C4) return;
  const int64_t b = blockIdx.x, j0 = b * kChunk, j1 = j0 + kChunk < N ? j0 + kChunk : N;
  float4 r[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k)
    if (j0 + k < j1) r[k] = reinterpret_cast<const float4*>(rows + order[j0 + k] * (int64_t{C4} * 4))[c];
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  int64_t seg = j0;
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    const int64_t j = j0 + k;
    if (j >= j1) break;
    add4(acc, r[k]);
    const int32_t id = sorted[j];
    if (j + 1 < j1 && sorted[j + 1] == id) continue;
    // the token's positions [seg, j] end here within the chunk
    const bool from_prev = seg == j0 && same(sorted, j0 - 1, N, id);
    const bool to_next = j + 1 == j1 && same(sorted, j1, N, id);
    if (!from_prev && !to_next) {
      if (id >= 0 && id < V) add_to_row(grad, id, C4, c, acc);
    } else if (seg == j0) {
      first_part[b * C4 + c] = acc;
    } else {
      last_part[b * C4 + c] = acc;
    }
    acc = make_float4(0.f, 0.f, 0.f, 0.f);
    seg = j + 1;
  }
}

// Each block whose chunk holds the first positions of a token that continues into the next chunk(s) adds that
// token's chunk sums in chunk order and the total to grad.
__global__ void embedding_runs_kernel(const int32_t* __restrict__ sorted, const float4* __restrict__ first_part,
                                      const float4* __restrict__ last_part, float* __restrict__ grad, int64_t N, int C4,
                                      int64_t V) {
  const int c = threadIdx.x;
  if (c >= C4) return;
  const int64_t b = blockIdx.x, j0 = b * kChunk, j1 = j0 + kChunk < N ? j0 + kChunk : N;
  const int32_t id = sorted[j1 - 1];
  if (!same(sorted, j1, N, id) || id < 0 || id >= V) return;  // no token runs on past this chunk
  const bool whole = sorted[j0] == id;                        // the token fills the chunk
  if (whole && same(sorted, j0 - 1, N, id)) return;           // it started in an earlier chunk: not ours
  float4 acc = whole ? first_part[b * C4 + c] : last_part[b * C4 + c];
  for (int64_t bb = b + 1;; ++bb) {
    add4(acc, first_part[bb * C4 + c]);
    const int64_t e = (bb + 1) * kChunk;
    if (!(e < N && sorted[e] == id)) break;  // (sorted: the token fills chunk bb when it continues past it)
  }
  add_to_row(grad, id, C4, c, acc);
}

constexpr int kScaleThreads = 256;

template <typename T, int VEC>
__global__ void __launch_bounds__(kScaleThreads)
    scale_unless_one_kernel(T* __restrict__ x, int64_t n, const float* __restrict__ r) {
  const float f = to_f(from_f<T>(*r));  // r in x's dtype first, as ATen's promotion with a 0-dim tensor gives
  if (f == 1.f) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kScaleThreads;
  const int64_t nvec = n / VEC;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kScaleThreads + threadIdx.x; i < nvec; i += stride) {
    float v[VEC];
    load_f<T, VEC>(x + i * VEC, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] *= f;
    store_f<T, VEC>(x + i * VEC, v);
  }
  for (int64_t i = nvec * VEC + static_cast<int64_t>(blockIdx.x) * kScaleThreads + threadIdx.x; i < n; i += stride)
    x[i] = from_f<T>(to_f(x[i]) * f);
}

}  // namespace

int64_t embedding_rows_scratch(int64_t N, int C) { return 2 * ((N + kChunk - 1) / kChunk) * int64_t{C}; }

const char* embedding_rows_add(const int32_t* sorted, const int64_t* order, const float* rows, float* grad,
                               float* scratch, int64_t N, int C, int64_t V, void* stream) {
  if (N == 0) return nullptr;
  if (C % 4 != 0 || C > 4 * 1024) return "embedding_rows_add: C must be a multiple of 4, at most 4096";
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  if (chunks > 0x7fffffffLL) return "embedding_rows_add: too many rows for one launch";
  const int C4 = C / 4;
  const int threads = (C4 + 31) / 32 * 32;
  auto* first = reinterpret_cast<float4*>(scratch);
  float4* last = first + chunks * C4;
  auto st = static_cast<cudaStream_t>(stream);
  embedding_chunks_kernel<<<static_cast<unsigned>(chunks), threads, 0, st>>>(sorted, order, rows, grad, first, last, N,
                                                                             C4, V);
  embedding_runs_kernel<<<static_cast<unsigned>(chunks), threads, 0, st>>>(sorted, first, last, grad, N, C4, V);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

const char* scale_unless_one(void* x, DType dtype, int64_t n, const float* r, void* stream) {
  if (n == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  const bool vec = aligned16(x);
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    const int64_t work = vec ? (n + kVec - 1) / kVec : n;
    const int64_t blocks =
        std::min<int64_t>((work + kScaleThreads - 1) / kScaleThreads, int64_t{multiprocessor_count()} * 8);
    T* p = static_cast<T*>(x);
    if (vec) scale_unless_one_kernel<T, kVec><<<static_cast<unsigned>(blocks), kScaleThreads, 0, s>>>(p, n, r);
    else
      scale_unless_one_kernel<T, 1><<<static_cast<unsigned>(blocks), kScaleThreads, 0, s>>>(p, n, r);
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace ampcheck::kernels::cuda
