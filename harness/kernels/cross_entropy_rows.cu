// The fused head's row kernel (kernels/head.h: cross_entropy_rows_): for each row of logits, in one block,
//   pass 1: running max and sum of exp over the row (fp32, online softmax), combined across the block;
//   the row's loss = log-sum-exp − logit[target];
//   pass 2: the row overwritten in place by (softmax − one-hot(target)) · factor, rounded to the logits' dtype.
// Two reads and one write of the row in its own dtype — where the stock path writes fp32 copies of the whole
// (rows × vocab) logits, their log-softmax and its gradient. Where the row fits twice in an SM's shared memory (16-bit
// logits, V up to about 58k: GPT-2's 50257), the shared-memory kernel below reads each row from device memory once.
// Plain CUDA C++ (no ATen headers): head.cpp is the
// ATen side. Built only where LibTorch has CUDA and nvcc is found (CMake option AMPCHECK_CUDA_KERNELS).
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <cmath>
#include <cstdint>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// (max, sum of exp(x - max)) pairs combine associatively; -inf max means an empty sum.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  if (m2 > m) {
    s = s * __expf(m - m2) + s2;
    m = m2;
  } else
    s += s2 * __expf(m2 - m);
}
__device__ __forceinline__ void add_value(float& m, float& s, float v) {
  if (v > m) {
    s = (m == -INFINITY ? 0.f : s * __expf(m - v)) + 1.f;
    m = v;
  } else
    s += __expf(v - m);
}

// The block's (max, sum) pairs combined — warp, then block — into the row's log-sum-exp, returned on every thread of
// the NT-thread block; thread 0 writes the row's loss, reading the target logit before the barrier that precedes any
// thread's pass 2 (so before the row is overwritten).
template <int NT, typename T>
__device__ __forceinline__ float block_log_sum_exp(float m, float s, const T* x, int64_t t, bool ignored, bool bad,
                                                   float* loss_out) {
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
    combine(m, s, m2, s2);
  }
  __shared__ float sm[NT / 32], ss[NT / 32];
  __shared__ float lse_shared;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < NT / 32 ? sm[lane] : -INFINITY;
    s = lane < NT / 32 ? ss[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
      combine(m, s, m2, s2);
    }
    if (lane == 0) {
      const float lse = m + logf(s);
      lse_shared = lse;
      *loss_out = ignored ? 0.f : bad ? NAN : lse - to_f(x[t]);
    }
  }
  __syncthreads();
  return lse_shared;
}

// Pass 2 for one pack whose first element is column `first`: (softmax − one-hot(t)) · f, rounded to T.
template <typename T, int VEC>
__device__ __forceinline__ void gradient_pack(Pack<T, VEC>& p, int64_t first, int64_t t, float lse, float f) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float g = __expf(to_f(p.v[k]) - lse);
    if (first + k == t) g -= 1.f;
    p.v[k] = from_f<T>(g * f);
  }
}

// Pass 2 for the row's columns past the last whole pack, thread by thread.
template <int NT, typename T>
__device__ __forceinline__ void gradient_tail(T* x, int64_t from, int64_t V, int64_t t, float lse, float f) {
  for (int64_t i = from + threadIdx.x; i < V; i += NT) {
    Pack<T, 1> p{{x[i]}};
    gradient_pack<T, 1>(p, i, t, lse, f);
    x[i] = p.v[0];
  }
}

// VEC elements per load (16 bytes for 2-byte types when the row allows it, else 1).
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(T* logits, int64_t V, int64_t ld, const int64_t* targets, float* row_loss,
                              const float* factor, int64_t ignore_index) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= V);  // out of range: the row's loss and gradient are NaN (no assert)

  using P = Pack<T, VEC>;
  const int64_t nvec = V / VEC;
  P* xp = reinterpret_cast<P*>(x);

  float m = -INFINITY, s = 0.f;
  for (int64_t i = threadIdx.x; i < nvec; i += kThreads) {
    const P p = xp[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) add_value(m, s, to_f(p.v[k]));
  }
  for (int64_t i = nvec * VEC + threadIdx.x; i < V; i += kThreads) add_value(m, s, to_f(x[i]));

  const float lse = block_log_sum_exp<kThreads>(m, s, x, t, ignored, bad, row_loss + row);
  const float f = ignored ? 0.f : bad ? NAN : *factor;
  for (int64_t i = threadIdx.x; i < nvec; i += kThreads) {
    P p = xp[i];
    gradient_pack(p, i * VEC, t, lse, f);
    xp[i] = p;
  }
  gradient_tail<kThreads>(x, nvec * VEC, V, t, lse, f);
}

// The same two passes with the row kept in shared memory (16-bit logits whose row fits twice in an SM's shared
// memory: V up to about 58k, GPT-2's 50257): pass 1 reads the row from device memory (kSmemBatch 16-byte packs in
// flight per thread), stores it to shared memory and keeps a running (max, sum) per thread — one pack's max first,
// then its eight exponentials against it (a pack holding ±inf, or only -inf, takes the per-element path, so such rows
// give what the two-read kernel gives); pass 2 reads shared memory and writes the gradient. Two 512-thread blocks
// per SM. Measured on the H200 in the GPT-2 step (4 × 4096 rows): 1.19 ms against the two-read kernel's 1.30; the
// trials that did worse (a persistent block per SM double-buffering rows by cp.async, 1.48–1.51 ms; the two-read
// kernel with 1024 threads, 1.44, or held to fewer rows in flight, 1.66–2.01) are in
// reports/examples/gpu-h200-perf/trial-head-rows.md.
constexpr int kSmemThreads = 512;
constexpr int kSmemBatch = 4;
constexpr int kSmemRowBytes = 113 * 1024;  // two blocks' rows within the SM's 228 KB

template <typename T, int VEC>
__global__ void __launch_bounds__(kSmemThreads, 2)
    cross_entropy_rows_smem_kernel(T* logits, int64_t V, int64_t ld, const int64_t* targets, float* row_loss,
                                   const float* factor, int64_t ignore_index) {
  constexpr int NT = kSmemThreads, BATCH = kSmemBatch;
  extern __shared__ uint4 smem_row[];
  using P = Pack<T, VEC>;
  P* sp = reinterpret_cast<P*>(smem_row);
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  P* xp = reinterpret_cast<P*>(x);
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= V);
  const int nvec = static_cast<int>(V / VEC);
  float m = -INFINITY, s = 0.f;
  for (int base = threadIdx.x; base < nvec; base += NT * BATCH) {
    P p[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * NT;
      if (i < nvec) p[j] = xp[i];
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * NT;
      if (i >= nvec) continue;
      sp[i] = p[j];
      float v[VEC];
      float pm = -INFINITY;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[k] = to_f(p[j].v[k]);
        pm = fmaxf(pm, v[k]);
      }
      if (pm == -INFINITY || pm == INFINITY) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) add_value(m, s, v[k]);
        continue;
      }
      float ps = 0.f;
#pragma unroll
      for (int k = 0; k < VEC; ++k) ps += __expf(v[k] - pm);
      combine(m, s, pm, ps);
    }
  }
  for (int64_t i = static_cast<int64_t>(nvec) * VEC + threadIdx.x; i < V; i += NT) add_value(m, s, to_f(x[i]));

  const float lse = block_log_sum_exp<NT>(m, s, x, t, ignored, bad, row_loss + row);  // (its barriers: the row is in
  const float f = ignored ? 0.f : bad ? NAN : *factor;                                //  shared memory after them)
  for (int i = threadIdx.x; i < nvec; i += NT) {
    P p = sp[i];
    gradient_pack(p, static_cast<int64_t>(i) * VEC, t, lse, f);
    xp[i] = p;
  }
  gradient_tail<NT>(x, static_cast<int64_t>(nvec) * VEC, V, t, lse, f);
}

template <typename T>
void launch(void* logits, int64_t rows, int64_t V, int64_t ld, const int64_t* targets, float* row_loss,
            const float* factor, int64_t ignore_index, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(logits);
  const bool aligned = reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % kVec == 0;
  const int64_t smem = V / kVec * 16;
  if (aligned && sizeof(T) == 2 && V >= kVec && smem <= kSmemRowBytes) {
    static const cudaError_t attr = cudaFuncSetAttribute(cross_entropy_rows_smem_kernel<T, kVec>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemRowBytes);
    if (attr == cudaSuccess) {
      cross_entropy_rows_smem_kernel<T, kVec>
          <<<static_cast<unsigned>(rows), kSmemThreads, static_cast<size_t>(smem), stream>>>(
              p, V, ld, targets, row_loss, factor, ignore_index);
      return;
    }
    (void)cudaGetLastError();  // the attribute was refused: the two-read kernel below, and no error left behind
  }
  if (aligned)
    cross_entropy_rows_kernel<T, kVec>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p, V, ld, targets, row_loss, factor, ignore_index);
  else
    cross_entropy_rows_kernel<T, 1>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p, V, ld, targets, row_loss, factor, ignore_index);
}

}  // namespace

const char* cross_entropy_rows(void* logits, DType dtype, int64_t rows, int64_t V, int64_t ld, const int64_t* targets,
                               float* row_loss, const float* factor, int64_t ignore_index, void* stream) {
  if (rows == 0) return nullptr;
  if (rows > 0x7fffffffLL) return "cross_entropy_rows: too many rows for one launch";
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::Float32:
      launch<float>(logits, rows, V, ld, targets, row_loss, factor, ignore_index, s);
      break;
    case DType::Float16:
      launch<__half>(logits, rows, V, ld, targets, row_loss, factor, ignore_index, s);
      break;
    case DType::BFloat16:
      launch<__nv_bfloat16>(logits, rows, V, ld, targets, row_loss, factor, ignore_index, s);
      break;
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace ampcheck::kernels::cuda
