// AdamW's fused step with the updated parameters' sums of squares in the same pass (kernels/adamw.h:
// adamw_square_sums_, engine option train.fused_param_norm):
//   adamw_kernel: up to kAdamTensors fp32 tensors per launch, their pointers in the kernel's arguments; each block
//                 finds its tensor by a binary search over the tensors' first blocks and takes kSqBlockElems elements
//                 of it — square_sums.cu's partition, thread for thread. Each element is updated by ATen's AdamW
//                 formula as _fused_adamw_ computes it (aten/src/ATen/native/cuda/fused_adam_utils.cuh of PyTorch
//                 2.11: fp32 arithmetic, the two moments by fmaf, the bias corrections by powf of the tensor's step
//                 count) — the same values bit for bit (CudaKernels.AdamWMatchesFusedAdamW) —, and the block's sum of
//                 the updated parameter's squares is added in square_sums_kernel's order and written to the tensor's
//                 slot in part_sum, so square_sums_total over every parameter's slots is bit for bit the parameter
//                 norm's own pass. Where found_inf holds 1 nothing is written but the sums (of the unchanged values).
//                 With gpart_sum (only without grad_scale: the grads as read are the grads as stored), the grads'
//                 partial sums of squares too, in the same layout (train.fused_param_norm's gradient norm without a
//                 GradScaler).
// Plain CUDA C++; adamw.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kAdamThreads = kSquareSumThreads;  // square_sums.cu's partition: the same blocks, thread for thread
constexpr int64_t kAdamBlockElems = kSquareSumBlockElems;

struct AdamArgs {
  float* p[kAdamTensors];
  float* g[kAdamTensors];
  float* m[kAdamTensors];
  float* v[kAdamTensors];
  const float* step[kAdamTensors];
  int64_t numel[kAdamTensors];
  int64_t part_first[kAdamTensors];   // tensor t's first partial in part_sum
  int first_block[kAdamTensors + 1];  // tensor t owns blocks [first_block[t], first_block[t + 1])
  uint64_t vec_mask;                  // bit t: p, g, m, v of tensor t all 16-byte aligned
  uint64_t p_vec_mask;                // bit t: p of tensor t 16-byte aligned (square_sums' order of additions)
  uint64_t g_vec_mask;                // bit t: g of tensor t 16-byte aligned
  int count;
};
static_assert(kAdamTensors <= 64, "the masks hold one bit per tensor");

struct AdamScalars {
  const float* lr_ptr;  // where given, the learning rate read on the device (a captured step's), else lr
  float lr, beta1, beta2, weight_decay, eps;
  const float* grad_scale;  // where given: grads divided by it, and the unscaled grads stored
  const float* found_inf;   // where it holds 1: no update
};

// One element, as ATen's adam_math<float, float, 4, ADAMW, false> (maximize false) updates it.
__device__ __forceinline__ void adamw_element(float& param, float& grad, float& exp_avg, float& exp_avg_sq,
                                              const AdamScalars& s, float lr, float bias_correction1,
                                              float bias_correction2_sqrt) {
  if (s.grad_scale) grad /= *s.grad_scale;
  if (s.weight_decay != 0) param -= lr * s.weight_decay * param;
  exp_avg = fmaf(s.beta1, exp_avg, fmaf(-s.beta1, grad, grad));
  exp_avg_sq = fmaf(s.beta2, exp_avg_sq, fmaf(-s.beta2, grad * grad, grad * grad));
  const float step_size = lr / bias_correction1;
  const float denom = (sqrtf(exp_avg_sq) / bias_correction2_sqrt) + s.eps;
  param -= step_size * exp_avg / denom;
}

// Σ x² of x[begin, end) as one thread of square_sums_kernel adds it (8 at a time from `begin + thread · 8` where x is
// 16-byte aligned, then the tail; else one at a time), onto `sum`.
__device__ __forceinline__ float thread_square_sum(const float* x, int64_t begin, int64_t end, bool vec, float sum) {
  int64_t scalar_from = begin;
  if (vec) {
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * 8; i + 8 <= end; i += int64_t{kAdamThreads} * 8) {
      float xv[8];
      load_f<float, 4>(x + i, *reinterpret_cast<float(*)[4]>(&xv[0]));
      load_f<float, 4>(x + i + 4, *reinterpret_cast<float(*)[4]>(&xv[4]));
#pragma unroll
      for (int k = 0; k < 8; ++k) sum += xv[k] * xv[k];
    }
    scalar_from = begin + (end - begin) / 8 * 8;
  }
  for (int64_t j = scalar_from + threadIdx.x; j < end; j += kAdamThreads) {
    const float xj = x[j];
    sum += xj * xj;
  }
  return sum;
}

// The block's sum (warps in order, as square_sums_kernel) written by thread 0 to out.
__device__ __forceinline__ void block_sum_to(float sum, float* out) {
  sum = warp_sum(sum);
  __shared__ float sm[kAdamThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // sm free (a second call in the block)
  if (lane == 0) sm[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kAdamThreads / 32; ++w) total += sm[w];
    *out = total;
  }
}

__global__ void __launch_bounds__(kAdamThreads)
    adamw_kernel(const __grid_constant__ AdamArgs a, const AdamScalars s, float* __restrict__ part_sum,
                 float* __restrict__ gpart_sum) {
  const int b = static_cast<int>(blockIdx.x);
  const int t = tensor_of_block(a.first_block, a.count, b);
  float* __restrict__ p = a.p[t];
  float* __restrict__ g = a.g[t];
  float* __restrict__ m = a.m[t];
  float* __restrict__ v = a.v[t];
  const int64_t begin = static_cast<int64_t>(b - a.first_block[t]) * kAdamBlockElems;
  const int64_t end = begin + kAdamBlockElems < a.numel[t] ? begin + kAdamBlockElems : a.numel[t];
  const bool update = !(s.found_inf && *s.found_inf == 1.f);
  const float lr = s.lr_ptr ? *s.lr_ptr : s.lr;
  const float step_count = *a.step[t];
  const float bias_correction1 = 1 - powf(s.beta1, step_count);
  const float bias_correction2 = 1 - powf(s.beta2, step_count);
  const float bias_correction2_sqrt = sqrtf(bias_correction2);

  float sum = 0.f, gsum = 0.f;
  const bool gsums = gpart_sum != nullptr;
  if ((a.vec_mask >> t) & 1u) {  // p, g, m, v aligned: 8 elements per thread and step, in square_sums' order
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * 8; i + 8 <= end; i += int64_t{kAdamThreads} * 8) {
      float pv[8], gv[8];
      load_f<float, 4>(p + i, *reinterpret_cast<float(*)[4]>(&pv[0]));
      load_f<float, 4>(p + i + 4, *reinterpret_cast<float(*)[4]>(&pv[4]));
      if (update || gsums) {
        load_f<float, 4>(g + i, *reinterpret_cast<float(*)[4]>(&gv[0]));
        load_f<float, 4>(g + i + 4, *reinterpret_cast<float(*)[4]>(&gv[4]));
      }
      if (gsums) {
#pragma unroll
        for (int k = 0; k < 8; ++k) gsum += gv[k] * gv[k];
      }
      if (update) {
        float mv[8], vv[8];
        load_f<float, 4>(m + i, *reinterpret_cast<float(*)[4]>(&mv[0]));
        load_f<float, 4>(m + i + 4, *reinterpret_cast<float(*)[4]>(&mv[4]));
        load_f<float, 4>(v + i, *reinterpret_cast<float(*)[4]>(&vv[0]));
        load_f<float, 4>(v + i + 4, *reinterpret_cast<float(*)[4]>(&vv[4]));
#pragma unroll
        for (int k = 0; k < 8; ++k)
          adamw_element(pv[k], gv[k], mv[k], vv[k], s, lr, bias_correction1, bias_correction2_sqrt);
        store_f<float, 4>(p + i, *reinterpret_cast<float(*)[4]>(&pv[0]));
        store_f<float, 4>(p + i + 4, *reinterpret_cast<float(*)[4]>(&pv[4]));
        store_f<float, 4>(m + i, *reinterpret_cast<float(*)[4]>(&mv[0]));
        store_f<float, 4>(m + i + 4, *reinterpret_cast<float(*)[4]>(&mv[4]));
        store_f<float, 4>(v + i, *reinterpret_cast<float(*)[4]>(&vv[0]));
        store_f<float, 4>(v + i + 4, *reinterpret_cast<float(*)[4]>(&vv[4]));
        if (s.grad_scale) {
          store_f<float, 4>(g + i, *reinterpret_cast<float(*)[4]>(&gv[0]));
          store_f<float, 4>(g + i + 4, *reinterpret_cast<float(*)[4]>(&gv[4]));
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) sum += pv[k] * pv[k];
    }
    // the tail (end - begin not a multiple of 8): thread by thread
    for (int64_t j = begin + (end - begin) / 8 * 8 + threadIdx.x; j < end; j += kAdamThreads) {
      float pj = p[j];
      if (gsums) gsum += g[j] * g[j];
      if (update) {
        float gj = g[j], mj = m[j], vj = v[j];
        adamw_element(pj, gj, mj, vj, s, lr, bias_correction1, bias_correction2_sqrt);
        p[j] = pj;
        m[j] = mj;
        v[j] = vj;
        if (s.grad_scale) g[j] = gj;
      }
      sum += pj * pj;
    }
  } else {  // some tensor not aligned: update element by element, then sum in the order square_sums would
    if (gsums) gsum = thread_square_sum(g, begin, end, (a.g_vec_mask >> t) & 1u, 0.f);  // (g not written: no scale)
    if (update) {
      for (int64_t j = begin + threadIdx.x; j < end; j += kAdamThreads) {
        float pj = p[j], gj = g[j], mj = m[j], vj = v[j];
        adamw_element(pj, gj, mj, vj, s, lr, bias_correction1, bias_correction2_sqrt);
        p[j] = pj;
        m[j] = mj;
        v[j] = vj;
        if (s.grad_scale) g[j] = gj;
      }
      __syncthreads();  // the block's updated parameters visible to every thread of the block
    }
    sum = thread_square_sum(p, begin, end, (a.p_vec_mask >> t) & 1u, 0.f);
  }
  const int64_t slot = a.part_first[t] + (b - a.first_block[t]);
  block_sum_to(sum, part_sum + slot);
  if (gsums) block_sum_to(gsum, gpart_sum + slot);
}

}  // namespace

const char* adamw_square_sums(const AdamTensors& ts, int count, const AdamHyper& h, float* part_sum, float* gpart_sum,
                              void* stream) {
  if (gpart_sum && h.grad_scale) return "adamw_square_sums: the grads' sums are of unscaled grads only (no grad_scale)";
  auto st = static_cast<cudaStream_t>(stream);
  AdamScalars s{h.lr_ptr, h.lr, h.beta1, h.beta2, h.weight_decay, h.eps, h.grad_scale, h.found_inf};
  for (int base = 0; base < count; base += kAdamTensors) {
    AdamArgs a{};
    a.count = 0;
    int blocks = 0;
    for (int t = base; t < count && a.count < kAdamTensors; ++t) {
      if (ts.numel[t] == 0) continue;
      const int k = a.count++;
      a.p[k] = ts.p[t];
      a.g[k] = ts.g[t];
      a.m[k] = ts.m[t];
      a.v[k] = ts.v[t];
      a.step[k] = ts.step[t];
      a.numel[k] = ts.numel[t];
      a.part_first[k] = ts.part_first[t];
      a.first_block[k] = blocks;
      if (aligned16(ts.p[t]) && aligned16(ts.g[t]) && aligned16(ts.m[t]) && aligned16(ts.v[t]))
        a.vec_mask |= uint64_t{1} << k;
      if (aligned16(ts.p[t])) a.p_vec_mask |= uint64_t{1} << k;
      if (aligned16(ts.g[t])) a.g_vec_mask |= uint64_t{1} << k;
      blocks += static_cast<int>((ts.numel[t] + kAdamBlockElems - 1) / kAdamBlockElems);
    }
    if (a.count == 0) continue;
    a.first_block[a.count] = blocks;
    adamw_kernel<<<static_cast<unsigned>(blocks), kAdamThreads, 0, st>>>(a, s, part_sum, gpart_sum);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  return nullptr;
}

}  // namespace ampcheck::kernels::cuda
