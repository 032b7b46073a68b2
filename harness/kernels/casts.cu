// Casts in few passes (kernels/casts.h: cast_many, widen_sum):
//   cast_many: up to kMaxCastTensors fp32 tensors rounded to bf16 / fp16 (round to nearest even, as at::Tensor::to)
//              in one launch: the tensors' pointers and sizes travel in the kernel's arguments; each block finds its
//              tensor by a binary search over the tensors' first blocks, then casts 8 elements per thread and step
//              (two 16-byte loads, one 16-byte store) where the tensor is aligned so, one at a time elsewhere.
//   widen_sum: out (fp32) = Σ_k parts[k] (fp16 / bf16) added in k order in fp32, with 16-byte loads; with one part a
//              vectorised widening cast.
// Plain CUDA C++; casts.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kCastThreads = 256;
constexpr int64_t kCastBlockElems = int64_t{kCastThreads} * 8 * 4;  // 8 per thread and step, 4 steps

struct CastArgs {
  const float* src[kMaxCastTensors];
  void* dst[kMaxCastTensors];
  int64_t numel[kMaxCastTensors];
  int first_block[kMaxCastTensors + 1];            // tensor t owns blocks [first_block[t], first_block[t + 1])
  uint32_t vec_mask[(kMaxCastTensors + 31) / 32];  // bit t: tensor t's src and dst are 16-byte aligned
  int count;
};

template <typename TO>
__global__ void __launch_bounds__(kCastThreads) cast_many_kernel(const __grid_constant__ CastArgs args) {
  const int b = static_cast<int>(blockIdx.x);
  const int t = tensor_of_block(args.first_block, args.count, b);
  const float* __restrict__ src = args.src[t];
  TO* __restrict__ dst = static_cast<TO*>(args.dst[t]);
  const int64_t begin = static_cast<int64_t>(b - args.first_block[t]) * kCastBlockElems;
  const int64_t end = begin + kCastBlockElems < args.numel[t] ? begin + kCastBlockElems : args.numel[t];
  const bool vec = (args.vec_mask[t / 32] >> (t % 32)) & 1u;
  int64_t i = begin + static_cast<int64_t>(threadIdx.x) * 8;
  if (vec) {
    for (; i + 8 <= end; i += int64_t{kCastThreads} * 8) {
      float v[8];
      load_f<float, 4>(src + i, *reinterpret_cast<float(*)[4]>(&v[0]));
      load_f<float, 4>(src + i + 4, *reinterpret_cast<float(*)[4]>(&v[4]));
      store_f<TO, 8>(dst + i, v);
    }
    // the tail (end - begin not a multiple of 8): thread by thread
    const int64_t tail = begin + (end - begin) / 8 * 8;
    for (int64_t j = tail + threadIdx.x; j < end; j += kCastThreads) dst[j] = from_f<TO>(src[j]);
  } else {
    for (int64_t j = begin + threadIdx.x; j < end; j += kCastThreads) dst[j] = from_f<TO>(src[j]);
  }
}

constexpr int kSumThreads = 256;

template <typename T>
struct WidenParts {
  const T* part[kMaxWidenParts];
};

template <typename T, int kParts, bool kVec>
__global__ void __launch_bounds__(kSumThreads)
    widen_sum_kernel(const __grid_constant__ WidenParts<T> p, float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSumThreads * (kVec ? 8 : 1);
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x) * (kVec ? 8 : 1); i < n;
       i += stride) {
    if constexpr (kVec) {
      float acc[8], v[8];
      load_f<T, 8>(p.part[0] + i, acc);
#pragma unroll
      for (int k = 1; k < kParts; ++k) {
        load_f<T, 8>(p.part[k] + i, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += v[e];
      }
      store_f<float, 4>(out + i, *reinterpret_cast<float(*)[4]>(&acc[0]));
      store_f<float, 4>(out + i + 4, *reinterpret_cast<float(*)[4]>(&acc[4]));
    } else {
      float acc = to_f(p.part[0][i]);
#pragma unroll
      for (int k = 1; k < kParts; ++k) acc += to_f(p.part[k][i]);
      out[i] = acc;
    }
  }
}

template <typename T, int kParts>
void launch_widen(const WidenParts<T>& p, float* out, int64_t n, bool vec, cudaStream_t st) {
  const int64_t per = vec ? 8 : 1;
  const int64_t want = (n / per + kSumThreads - 1) / kSumThreads;
  const unsigned blocks = static_cast<unsigned>(
      want < int64_t{8} * multiprocessor_count() ? (want > 0 ? want : 1) : int64_t{8} * multiprocessor_count());
  if (vec) widen_sum_kernel<T, kParts, true><<<blocks, kSumThreads, 0, st>>>(p, out, n);
  else
    widen_sum_kernel<T, kParts, false><<<blocks, kSumThreads, 0, st>>>(p, out, n);
}

}  // namespace

const char* cast_many(const float* const* src, void* const* dst, const int64_t* numel, int count, DType dst_dtype,
                      void* stream) {
  if (dst_dtype == DType::Float32) return "cast_many: the destination must be float16 or bfloat16";
  auto st = static_cast<cudaStream_t>(stream);
  for (int base = 0; base < count; base += kMaxCastTensors) {
    CastArgs a{};
    a.count = 0;
    int blocks = 0;
    for (int t = base; t < count && a.count < kMaxCastTensors; ++t) {
      if (numel[t] == 0) continue;
      const int k = a.count++;
      a.src[k] = src[t];
      a.dst[k] = dst[t];
      a.numel[k] = numel[t];
      a.first_block[k] = blocks;
      if (aligned16(src[t]) && aligned16(dst[t])) a.vec_mask[k / 32] |= 1u << (k % 32);
      blocks += static_cast<int>((numel[t] + kCastBlockElems - 1) / kCastBlockElems);
    }
    if (a.count == 0) continue;
    a.first_block[a.count] = blocks;
    if (dst_dtype == DType::BFloat16) cast_many_kernel<__nv_bfloat16><<<blocks, kCastThreads, 0, st>>>(a);
    else
      cast_many_kernel<__half><<<blocks, kCastThreads, 0, st>>>(a);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  return nullptr;
}

const char* widen_sum(const void* const* parts, int count, DType part_dtype, float* out, int64_t n, void* stream) {
  if (count < 1 || count > kMaxWidenParts) return "widen_sum: 1 to kMaxWidenParts parts";
  if (part_dtype == DType::Float32) return "widen_sum: parts must be float16 or bfloat16";
  if (n == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  bool vec = n % 8 == 0 && aligned16(out);
  for (int k = 0; k < count; ++k) vec = vec && aligned16(parts[k]);
  with_type(part_dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, float>) {
      WidenParts<T> p{};
      for (int k = 0; k < count; ++k) p.part[k] = static_cast<const T*>(parts[k]);
      switch (count) {
        case 1:
          launch_widen<T, 1>(p, out, n, vec, st);
          break;
        case 2:
          launch_widen<T, 2>(p, out, n, vec, st);
          break;
        case 3:
          launch_widen<T, 3>(p, out, n, vec, st);
          break;
        case 4:
          launch_widen<T, 4>(p, out, n, vec, st);
          break;
        case 5:
          launch_widen<T, 5>(p, out, n, vec, st);
          break;
        case 6:
          launch_widen<T, 6>(p, out, n, vec, st);
          break;
        case 7:
          launch_widen<T, 7>(p, out, n, vec, st);
          break;
        default:
          launch_widen<T, 8>(p, out, n, vec, st);
          break;
      }
    }
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace ampcheck::kernels::cuda
