// The fused residual add + LayerNorm (kernels/fused.h: add_layer_norm): one warp per row of C = 32·K channels
// (K ≤ 32, the row held in registers).
//   forward:  s = x + y (fp32; y in its own dtype, may be absent), h = (s − mean)·rstd·γ + β computed in fp32 and
//             rounded once to the output dtype (what autocast's fp32 LayerNorm followed by the Linear's cast gives);
//             mean and rstd (fp32) kept for backward.
//   backward: ds = ds_in + rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dh·γ, in fp32, written fp32 and (for the branch y)
//             rounded to y's dtype; per-block partial sums of dh·x̂ (dγ) and dh (dβ), summed by the caller.
// Plain CUDA C++; fused.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;  // backward
constexpr int kLimitK = 32;  // channels per lane: C ≤ 1024; kernels hold rows of up to kMaxK ∈ {8, 16, 24, 32} per lane



template <typename TY, typename TO, int kMaxK>
__global__ void __launch_bounds__(kWarps * 32) add_ln_fwd(const float* __restrict__ x, const TY* __restrict__ y,
                                                          const float* __restrict__ gamma, const float* __restrict__ beta,
                                                          float* __restrict__ s_out, TO* __restrict__ h,
                                                          float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                          int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const int K = C / 32;
  const int64_t base = row * C;
  float v[kMaxK];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) {
      const int64_t i = base + lane + 32 * k;
      v[k] = x[i] + (y ? to_f(y[i]) : 0.f);
      sum += v[k];
    }
  const float mean = warp_sum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) sq += (v[k] - mean) * (v[k] - mean);
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) {
      const int c = lane + 32 * k;
      const int64_t i = base + c;
      if (s_out) s_out[i] = v[k];
      h[i] = from_f<TO>((v[k] - mean) * rstd * gamma[c] + beta[c]);
    }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename TO, typename TY, int kMaxK>
__global__ void __launch_bounds__(kWarps * 32) add_ln_bwd(const TO* __restrict__ dh, const float* __restrict__ ds_in,
                                                          const float* __restrict__ s, const float* __restrict__ gamma,
                                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                                          float* __restrict__ ds_out, TY* __restrict__ dy_out,
                                                          float* __restrict__ dgamma_part, float* __restrict__ dbeta_part,
                                                          int64_t N, int C) {
  // few registers per thread (no per-lane accumulators: each row's dγ/dβ terms go straight into the block's shared
  // sums; the row is read twice, the second time from L1), so many warps share an SM; each warp takes kRowsPerWarp
  // consecutive rows
  __shared__ float sg[kMaxK * 32], sb[kMaxK * 32];  // (kMaxK is this instantiation's)
  for (int c = threadIdx.x; c < C; c += blockDim.x) sg[c] = sb[c] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int K = C / 32;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  for (int64_t row = first; row < N && row < first + kRowsPerWarp; ++row) {
    const int64_t base = row * C;
    const float mu = mean[row], rs = rstd[row];
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxK; ++k)
      if (k < K) {
        const int c = lane + 32 * k;
        const float d = to_f(dh[base + c]);
        const float xh = (s[base + c] - mu) * rs;
        const float g = d * gamma[c];
        atomicAdd(&sg[c], d * xh);
        atomicAdd(&sb[c], d);
        sum_g += g;
        sum_gx += g * xh;
      }
    const float a = warp_sum(sum_g) / C, b = warp_sum(sum_gx) / C;
#pragma unroll
    for (int k = 0; k < kMaxK; ++k)
      if (k < K) {
        const int c = lane + 32 * k;
        const int64_t i = base + c;
        const float xh = (s[i] - mu) * rs;
        const float d = rs * (to_f(dh[i]) * gamma[c] - a - xh * b) + (ds_in ? ds_in[i] : 0.f);
        ds_out[i] = d;
        if (dy_out) dy_out[i] = from_f<TY>(d);
      }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    dgamma_part[static_cast<int64_t>(blockIdx.x) * C + c] = sg[c];
    dbeta_part[static_cast<int64_t>(blockIdx.x) * C + c] = sb[c];
  }
}

// the smallest register row that holds C / 32 channels per lane
template <typename F>
void with_k(int C, F&& f) {
  const int K = C / 32;
  if (K <= 8) f(std::integral_constant<int, 8>{});
  else if (K <= 16) f(std::integral_constant<int, 16>{});
  else if (K <= 24) f(std::integral_constant<int, 24>{});
  else f(std::integral_constant<int, 32>{});
}

template <typename F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); break;
    case DType::Float16: f(__half{}); break;
    case DType::BFloat16: f(__nv_bfloat16{}); break;
  }
}

// y's dtype: float32, or the output's (the combinations a GPT block produces; fewer kernels to compile)
template <typename TO, typename F>
void with_same_or_float(DType y, F&& f) {
  if (y == DType::Float32) f(float{});
  else f(TO{});
}

}  // namespace

const char* add_layer_norm_forward(const float* x, const void* y, DType y_dtype, const float* gamma, const float* beta,
                                   float* s_out, void* h, DType h_dtype, float* mean, float* rstd, int64_t N, int C,
                                   float eps, void* stream) {
  if (C % 32 != 0 || C > 32 * kLimitK) return "add_layer_norm: channels must be a multiple of 32, at most 1024";
  if (N == 0) return nullptr;
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  auto st = static_cast<cudaStream_t>(stream);
  if (y_dtype != DType::Float32 && y_dtype != h_dtype) return "add_layer_norm: y must be float32 or the output's dtype";
  with_type(h_dtype, [&](auto to) {
    using TO = decltype(to);
    with_same_or_float<TO>(y_dtype, [&](auto ty) {
      using TY = decltype(ty);
      with_k(C, [&](auto k) {
        add_ln_fwd<TY, TO, decltype(k)::value><<<blocks, kWarps * 32, 0, st>>>(
            x, static_cast<const TY*>(y), gamma, beta, s_out, static_cast<TO*>(h), mean, rstd, N, C, eps);
      });
    });
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

int add_layer_norm_backward_blocks(int64_t N) {
  const int64_t rows_per_block = int64_t{kWarps} * kRowsPerWarp;
  return static_cast<int>(std::max<int64_t>(1, (N + rows_per_block - 1) / rows_per_block));
}

const char* add_layer_norm_backward(const void* dh, DType h_dtype, const float* ds_in, const float* s,
                                    const float* gamma, const float* mean, const float* rstd, float* ds_out,
                                    void* dy_out, DType y_dtype, float* dgamma_part, float* dbeta_part, int blocks,
                                    int64_t N, int C, void* stream) {
  if (C % 32 != 0 || C > 32 * kLimitK) return "add_layer_norm: channels must be a multiple of 32, at most 1024";
  auto st = static_cast<cudaStream_t>(stream);
  if (y_dtype != DType::Float32 && y_dtype != h_dtype) return "add_layer_norm: y must be float32 or the output's dtype";
  with_type(h_dtype, [&](auto to) {
    using TO = decltype(to);
    with_same_or_float<TO>(y_dtype, [&](auto ty) {
      using TY = decltype(ty);
      with_k(C, [&](auto k) {
        add_ln_bwd<TO, TY, decltype(k)::value><<<static_cast<unsigned>(blocks), kWarps * 32, 0, st>>>(
            static_cast<const TO*>(dh), ds_in, s, gamma, mean, rstd, ds_out, static_cast<TY*>(dy_out), dgamma_part,
            dbeta_part, N, C);
      });
    });
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace ampcheck::kernels::cuda
