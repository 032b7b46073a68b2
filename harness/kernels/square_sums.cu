// The sum of squares of many tensors and whether any element is inf or NaN, in one pass over them
// (kernels/square_sums.h: square_sum_nonfinite — the trainer's gradient and parameter norms, and the GradScaler's inf
// check read from the same pass):
//   square_sums_kernel: up to kMaxCastTensors tensors of one dtype per launch, their pointers and sizes in the kernel's
//                       arguments; each block finds its tensor by a binary search over the tensors' first blocks, sums
//                       x² (fp32) over its kSqBlockElems elements (8 per thread and step: 16-byte loads where aligned)
//                       and writes one partial sum and one non-finite flag.
//   square_sums_finish: one block adds the partials in a fixed order in fp64 (deterministic), rounds the total to fp32
//                       (inf where it exceeds fp32's range, as fp32 sums overflow) and writes the flag as 1.f / 0.f.
// Plain CUDA C++; square_sums.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kSqThreads = kSquareSumThreads;
constexpr int64_t kSqBlockElems = kSquareSumBlockElems;  // 8 per thread and step, 4 steps

struct SquareArgs {
  const void* src[kMaxCastTensors];
  int64_t numel[kMaxCastTensors];
  int first_block[kMaxCastTensors + 1];            // tensor t owns blocks [first_block[t], first_block[t + 1])
  uint32_t vec_mask[(kMaxCastTensors + 31) / 32];  // bit t: tensor t is 16-byte aligned
  int count;
};

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    load_f<T, 4>(p, *reinterpret_cast<float(*)[4]>(&v[0]));
    load_f<T, 4>(p + 4, *reinterpret_cast<float(*)[4]>(&v[4]));
  } else {
    load_f<T, 8>(p, v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kSqThreads)
    square_sums_kernel(const __grid_constant__ SquareArgs args, float* __restrict__ part_sum,
                       int* __restrict__ part_bad) {
  const int b = static_cast<int>(blockIdx.x);
  const int t = tensor_of_block(args.first_block, args.count, b);
  const T* __restrict__ src = static_cast<const T*>(args.src[t]);
  const int64_t begin = static_cast<int64_t>(b - args.first_block[t]) * kSqBlockElems;
  const int64_t end = begin + kSqBlockElems < args.numel[t] ? begin + kSqBlockElems : args.numel[t];
  const bool vec = (args.vec_mask[t / 32] >> (t % 32)) & 1u;
  float sum = 0.f;
  bool bad = false;
  int64_t scalar_from = begin;
  if (vec) {
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * 8; i + 8 <= end; i += int64_t{kSqThreads} * 8) {
      float v[8];
      load8<T>(src + i, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        sum += v[k] * v[k];
        bad |= !isfinite(v[k]);
      }
    }
    scalar_from = begin + (end - begin) / 8 * 8;  // the tail: thread by thread
  }
  for (int64_t j = scalar_from + threadIdx.x; j < end; j += kSqThreads) {
    const float v = to_f(src[j]);
    sum += v * v;
    bad |= !isfinite(v);
  }
  sum = warp_sum(sum);
  const bool any_bad = __any_sync(0xffffffffu, bad);
  __shared__ float sm[kSqThreads / 32];
  __shared__ int sb[kSqThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sm[warp] = sum;
    sb[warp] = any_bad ? 1 : 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    int f = 0;
#pragma unroll
    for (int w = 0; w < kSqThreads / 32; ++w) {  // warp order: a fixed order of additions
      s += sm[w];
      f |= sb[w];
    }
    part_sum[blockIdx.x] = s;
    part_bad[blockIdx.x] = f;
  }
}

constexpr int kFinishThreads = 1024;

__global__ void __launch_bounds__(kFinishThreads)
    square_sums_finish(const float* __restrict__ part_sum, const int* __restrict__ part_bad, int64_t P,
                       float* __restrict__ out_sum, float* __restrict__ out_found) {
  double s = 0.0;
  int f = 0;
  for (int64_t i = threadIdx.x; i < P; i += kFinishThreads) {
    s += static_cast<double>(part_sum[i]);
    f |= part_bad ? part_bad[i] : 0;
  }
  __shared__ double sm[kFinishThreads];
  __shared__ int sb[kFinishThreads];
  sm[threadIdx.x] = s;
  sb[threadIdx.x] = f;
  __syncthreads();
  for (int half = kFinishThreads / 2; half > 0; half /= 2) {  // a fixed tree: deterministic
    if (static_cast<int>(threadIdx.x) < half) {
      sm[threadIdx.x] += sm[threadIdx.x + half];
      sb[threadIdx.x] |= sb[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *out_sum = static_cast<float>(sm[0]);  // rounds to inf beyond fp32's range
    *out_found = sb[0] ? 1.f : 0.f;
  }
}

}  // namespace

int64_t square_sums_blocks(const int64_t* numel, int count) {
  int64_t blocks = 0;
  for (int t = 0; t < count; ++t) blocks += (numel[t] + kSqBlockElems - 1) / kSqBlockElems;
  return blocks;
}

const char* square_sums(const void* const* src, const int64_t* numel, int count, DType dtype, float* part_sum,
                        int* part_bad, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  for (int t0 = 0; t0 < count; t0 += kMaxCastTensors) {
    SquareArgs args{};
    args.count = count - t0 < kMaxCastTensors ? count - t0 : kMaxCastTensors;
    int blocks = 0;
    for (int k = 0; k < args.count; ++k) {
      args.src[k] = src[t0 + k];
      args.numel[k] = numel[t0 + k];
      args.first_block[k] = blocks;
      const int64_t nb = (numel[t0 + k] + kSqBlockElems - 1) / kSqBlockElems;
      blocks += static_cast<int>(nb);
      if (aligned16(src[t0 + k])) args.vec_mask[k / 32] |= 1u << (k % 32);
    }
    args.first_block[args.count] = blocks;
    if (blocks == 0) continue;
    with_type(dtype, [&](auto tv) {
      using T = decltype(tv);
      square_sums_kernel<T><<<static_cast<unsigned>(blocks), kSqThreads, 0, st>>>(args, part_sum, part_bad);
    });
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
    part_sum += blocks;
    part_bad += blocks;
  }
  return nullptr;
}

const char* square_sums_total(const float* part_sum, const int* part_bad, int64_t P, float* out_sum, float* out_found,
                              void* stream) {
  square_sums_finish<<<1, kFinishThreads, 0, static_cast<cudaStream_t>(stream)>>>(part_sum, part_bad, P, out_sum,
                                                                                  out_found);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace ampcheck::kernels::cuda
