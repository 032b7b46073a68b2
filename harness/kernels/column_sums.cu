// Column sums (a Linear's bias gradient: the sum of the output gradient over rows) and the GELU (tanh) backward fused
// with them (kernels/bias_gelu.h: linear_bias_gelu); and the fixed-order sum of per-block partial rows that these and
// the LayerNorm backward (layer_norm.cu) end with.
//   column_sums: grid (column tiles of 32·V, row blocks); each warp of a block takes every kColWarps-th row of the
//                block's rows, each lane V consecutive columns (one 16-byte load for V = 16 / sizeof(T), else V = 1),
//                kRows rows' loads in flight before the first is used, summing in fp32 in row order; the block adds
//                its warps in warp order and writes one row of partials.
//   sum_partials: out[c] = Σ_b part[b][c] in block order, one warp per 32 columns, rounded through the dtype the
//                 stock op would have returned (columns from round_from on: the LayerNorm's dγ, dβ stay fp32).
// Deterministic: no atomics, every order fixed. Plain CUDA C++; bias_gelu.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kColWarps = 8;

// ATen's GELU (tanh) backward for one element (GeluBackwardCUDAKernelImpl, approximate = "tanh"), term for term:
// opmath fp32, the 0.5 · right term and the final product in double as ATen's expression promotes them.
__device__ __forceinline__ float gelu_tanh_grad(float dy, float x) {
  constexpr float kBeta = static_cast<float>(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
  constexpr float kKappa = 0.044715f;
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  const float tanh_inner = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.f + tanh_inner;
  const double left_derivative = 0.5 * right;
  const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
  const float inner_derivative = kBeta * (1.f + 3.f * kKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return static_cast<float>(static_cast<double>(dy) * (left_derivative + right_derivative));
}

// One row of the warp's strip: the GELU backward where asked (dpre written), then the row added to the sums.
template <typename T, int V, bool kGelu>
__device__ __forceinline__ void column_row(const Pack<T, V>& gp, const Pack<T, V>& pp, T* __restrict__ dpre,
                                           float (&acc)[V]) {
  float v[V];
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = to_f(gp.v[k]);
  if constexpr (kGelu) {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = gelu_tanh_grad(v[k], to_f(pp.v[k]));
    store_f<T, V>(dpre, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = to_f(from_f<T>(v[k]));  // the sum sees dpre as written
  }
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] += v[k];
}

// Each warp loads kRows of its rows (raw packs, every load issued before any is used), then works them in row order:
// the same additions in the same order as one row at a time, with kRows times the bytes in flight (with the GELU
// backward two arrays' rows: 3 keeps it within 64 registers, the four blocks per SM the grid is sized for). Measured
// in the GPT-2 bf16 fast step on the H200 (two rounds, one call): 31.02 / 31.15 ms against 31.12 / 31.36 one row at a
// time (reports/examples/gpu-h200-perf/trial-column-rows.md).
template <bool kGelu>
constexpr int kRows = kGelu ? 3 : 4;

template <typename T, int V, bool kGelu>
__global__ void __launch_bounds__(kColWarps * 32, 4)
    column_sums_kernel(const T* __restrict__ g, const T* __restrict__ pre, T* __restrict__ dpre,
                       float* __restrict__ part, int64_t N, int64_t C, int64_t rows_per_block) {
  using P = Pack<T, V>;
  constexpr int R = kRows<kGelu>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * V;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r_end = r_begin + rows_per_block < N ? r_begin + rows_per_block : N;
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.f;
  if (c0 < C) {  // V divides C (the launcher's condition for V > 1): the whole vector is in range
    int64_t r = r_begin + warp;
    for (; r + (R - 1) * kColWarps < r_end; r += R * kColWarps) {
      P gp[R], pp[R];
#pragma unroll
      for (int j = 0; j < R; ++j) gp[j] = *reinterpret_cast<const P*>(g + (r + j * kColWarps) * C + c0);
      if constexpr (kGelu) {
#pragma unroll
        for (int j = 0; j < R; ++j) pp[j] = *reinterpret_cast<const P*>(pre + (r + j * kColWarps) * C + c0);
      }
#pragma unroll
      for (int j = 0; j < R; ++j)
        column_row<T, V, kGelu>(gp[j], pp[j], kGelu ? dpre + (r + j * kColWarps) * C + c0 : nullptr, acc);
    }
    for (; r < r_end; r += kColWarps) {
      const int64_t i = r * C + c0;
      P gp = *reinterpret_cast<const P*>(g + i), pp{};
      if constexpr (kGelu) pp = *reinterpret_cast<const P*>(pre + i);
      column_row<T, V, kGelu>(gp, pp, kGelu ? dpre + i : nullptr, acc);
    }
  }
  __shared__ float sm[kColWarps][32 * V];
#pragma unroll
  for (int k = 0; k < V; ++k) sm[warp][lane * V + k] = acc[k];
  __syncthreads();
  for (int j = threadIdx.x; j < 32 * V; j += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kColWarps; ++w) s += sm[w][j];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 * V + j;
    if (c < C) part[static_cast<int64_t>(blockIdx.y) * C + c] = s;
  }
}

template <typename T>
__global__ void __launch_bounds__(kColWarps * 32)
    sum_partials_kernel(const float* __restrict__ part, int64_t P, int64_t C, float* __restrict__ out,
                        int64_t round_from) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float s = 0.f;
  if (c < C)
    for (int64_t b = warp; b < P; b += kColWarps) s += part[b * C + c];
  __shared__ float sm[kColWarps][32];
  sm[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < C) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kColWarps; ++w) t += sm[w][lane];
    out[c] = c >= round_from ? to_f(from_f<T>(t)) : t;
  }
}

}  // namespace

int multiprocessor_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 132;
    return n;
  }();
  return sms;
}

const char* sum_partials(const float* part, int64_t P, int64_t C, float* out, DType round_through, void* stream,
                         int64_t round_from) {
  if (C == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>((C + 31) / 32);
  with_type(round_through, [&](auto t) {
    using T = decltype(t);
    sum_partials_kernel<T><<<blocks, kColWarps * 32, 0, st>>>(part, P, C, out, round_from);
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

int column_sum_row_blocks(int64_t N, int64_t C) {
  // about four blocks per SM in all, each with at least kColWarps rows; tiles of 32 columns (the narrowest vector)
  const int64_t tiles = std::max<int64_t>(1, (C + 255) / 256);
  const int64_t want = (int64_t{4} * multiprocessor_count() + tiles - 1) / tiles;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, (N + kColWarps - 1) / kColWarps)));
}

const char* column_sums(const void* g, const void* pre, void* dpre, DType dtype, float* part, int row_blocks,
                        float* out, int64_t N, int64_t C, void* stream) {
  if (C == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t rows_per_block = std::max<int64_t>(1, (N + row_blocks - 1) / row_blocks);
  with_type(dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int kV = 16 / static_cast<int>(sizeof(T));
    const bool vec = C % kV == 0 && aligned16(g) && (!pre || (aligned16(pre) && aligned16(dpre)));
    auto launch = [&](auto kernel, int v) {
      const dim3 grid(static_cast<unsigned>((C + 32 * v - 1) / (32 * v)), static_cast<unsigned>(row_blocks));
      kernel<<<grid, kColWarps * 32, 0, st>>>(static_cast<const T*>(g), static_cast<const T*>(pre),
                                              static_cast<T*>(dpre), part, N, C, rows_per_block);
    };
    if (pre) {
      if (vec) launch(column_sums_kernel<T, kV, true>, kV);
      else
        launch(column_sums_kernel<T, 1, true>, 1);
    } else {
      if (vec) launch(column_sums_kernel<T, kV, false>, kV);
      else
        launch(column_sums_kernel<T, 1, false>, 1);
    }
  });
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return sum_partials(part, row_blocks, C, out, dtype, stream);
}

}  // namespace ampcheck::kernels::cuda
