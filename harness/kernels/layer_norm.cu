// The fused residual add + LayerNorm (kernels/layer_norm.h: add_layer_norm): one warp per row of C = 32·K channels
// (K ≤ 32, the row held in registers).
//   forward:  s = x + y (fp32; y in its own dtype, may be absent), h = (s − mean)·rstd·γ + β computed in fp32 and
//             rounded once to the output dtype (what autocast's fp32 LayerNorm followed by the Linear's cast gives);
//             mean and rstd (fp32) kept for backward.
//   backward: ds = ds_in + rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dh·γ, in fp32, written fp32 and (for the branch y)
//             rounded to y's dtype; per-block partial sums of dh·x̂ (dγ), dh (dβ) and, where asked, of dy as written
//             (the bias gradient of the Linear whose output y is), summed by the caller.
// Plain CUDA C++; layer_norm.cpp is the ATen side.
#include "kernels/cuda_math.cuh"
#include "kernels/kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

namespace ampcheck::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kLimitK = 32;  // channels per lane: C ≤ 1024; kernels hold rows of up to kMaxK ∈ {8, 16, 24, 32} per lane

// Forward: one warp per row. Each lane owns V consecutive channels per group of 32·V, J groups (C = 32·V·J): V = 4
// (16-byte loads) where C is a multiple of 128 and the pointers are aligned — 0.93 against 1.08 ms per GPT-2 step for
// V = 1 on the H200, 2026-12-04 — else V = 1. The row's sums add a lane's channels in group order, so the two widths
// may give mean and rstd that differ in the last bit.
template <typename TY, typename TO, int V, int kMaxJ>
__global__ void __launch_bounds__(kWarps * 32)
    add_ln_fwd(const float* __restrict__ x, const TY* __restrict__ y, const float* __restrict__ gamma,
               const float* __restrict__ beta, float* __restrict__ s_out, TO* __restrict__ h,
               float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const int J = C / (32 * V);
  const int64_t base = row * C;
  float v[kMaxJ][V];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxJ; ++j)
    if (j < J) {
      const int c = V * lane + 32 * V * j;
      load_f<float, V>(x + base + c, v[j]);
      if (y) {
        float w[V];
        load_f<TY, V>(y + base + c, w);
#pragma unroll
        for (int k = 0; k < V; ++k) v[j][k] += w[k];
      }
#pragma unroll
      for (int k = 0; k < V; ++k) sum += v[j][k];
    }
  const float mean = warp_sum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxJ; ++j)
    if (j < J)
#pragma unroll
      for (int k = 0; k < V; ++k) sq += (v[j][k] - mean) * (v[j][k] - mean);
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
  for (int j = 0; j < kMaxJ; ++j)
    if (j < J) {
      const int c = V * lane + 32 * V * j;
      float gm[V], bt[V], o[V];
      load_f<float, V>(gamma + c, gm);
      load_f<float, V>(beta + c, bt);
      if (s_out) store_f<float, V>(s_out + base + c, v[j]);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = (v[j][k] - mean) * rstd * gm[k] + bt[k];
      store_f<TO, V>(h + base + c, o);
    }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Backward: one warp per row at a time, each warp striding over rows (gridDim.x · kBwdWarps warps in all, one wave),
// holding the row (dh, x̂ and ds_in, fp32) in registers: one memory round trip per row. Each lane owns V consecutive
// channels per group of 32·V (V = 4: one 16- or 8-byte load per tensor; V = 1 for widths that are not a multiple of
// 128), J groups (C = 32·V·J); its running dγ / dβ (and bias) sums live in its warp's row of shared memory (registers
// were the limit on rows in flight: 2026-12-04's trial, 1.80 → 1.39 ms per GPT-2 step for the 24 backward passes). At
// the end the block adds its warps' rows in warp order (deterministic) and writes one row of partials [dγ | dβ] (W = 2C
// floats) or [dγ | dβ | Σ dy] (W = 3C: the bias gradient, dy summed as written in y's dtype, as the stock sum of the
// Linear's output gradient sees it); sum_partials adds the blocks' rows in a fixed order.
constexpr int kBwdWarps = 4;

template <typename TO, typename TY, int V, int kMaxJ>
__global__ void __launch_bounds__(kBwdWarps * 32)
    add_ln_bwd(const TO* __restrict__ dh, const float* __restrict__ ds_in, const float* __restrict__ s,
               const float* __restrict__ gamma, const float* __restrict__ mean, const float* __restrict__ rstd,
               float* __restrict__ ds_out, TY* __restrict__ dy_out, float* __restrict__ part, int64_t N, int C, int W) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int J = C / (32 * V);
  const bool bias = W > 2 * C;
  // warp w's running dγ sums at acc[w · W + c], its dβ sums at acc[w · W + C + c], its bias sums at acc[w · W + 2C +
  // c]; each lane owns its channels (dynamic shared memory: kBwdWarps · W floats)
  extern __shared__ __align__(16) float acc[];
  for (int c = lane; c < W; c += 32) acc[warp * W + c] = 0.f;
  __syncwarp();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kBwdWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kBwdWarps + warp; row < N; row += stride) {
    const int64_t base = row * C;
    const float mu = mean[row], rs = rstd[row];
    float d[kMaxJ][V], xh[kMaxJ][V];
    float din[kMaxJ][V];
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxJ; ++j)
      if (j < J) {
        const int c = V * lane + 32 * V * j;
        float sv[V], gm[V];
        load_f<TO, V>(dh + base + c, d[j]);
        load_f<float, V>(s + base + c, sv);
        if (ds_in) load_f<float, V>(ds_in + base + c, din[j]);
        load_f<float, V>(gamma + c, gm);
        float pg[V], pb[V];
        load_f<float, V>(acc + warp * W + c, pg);
        load_f<float, V>(acc + warp * W + C + c, pb);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          xh[j][k] = (sv[k] - mu) * rs;
          pg[k] += d[j][k] * xh[j][k];
          pb[k] += d[j][k];
          const float g = d[j][k] * gm[k];
          sum_g += g;
          sum_gx += g * xh[j][k];
        }
        store_f<float, V>(acc + warp * W + c, pg);
        store_f<float, V>(acc + warp * W + C + c, pb);
      }
    const float a = warp_sum(sum_g) / C, b = warp_sum(sum_gx) / C;
#pragma unroll
    for (int j = 0; j < kMaxJ; ++j)
      if (j < J) {
        const int c = V * lane + 32 * V * j;
        float gm[V], o[V];
        load_f<float, V>(gamma + c, gm);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] = rs * (d[j][k] * gm[k] - a - xh[j][k] * b) + (ds_in ? din[j][k] : 0.f);
        store_f<float, V>(ds_out + base + c, o);
        if (dy_out) store_f<TY, V>(dy_out + base + c, o);
        if (bias) {
          float pd[V];
          load_f<float, V>(acc + warp * W + 2 * C + c, pd);
#pragma unroll
          for (int k = 0; k < V; ++k) pd[k] += to_f(from_f<TY>(o[k]));  // dy as written
          store_f<float, V>(acc + warp * W + 2 * C + c, pd);
        }
      }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < W; c += blockDim.x) {  // warp by warp: a fixed order of additions
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kBwdWarps; ++w) t += acc[w * W + c];
    part[static_cast<int64_t>(blockIdx.x) * W + c] = t;
  }
}

// launches an add_ln_bwd instantiation, casting dh and dy_out to its element types
template <typename TO, typename TY>
void kernel_args_launch(void (*kernel)(const TO*, const float*, const float*, const float*, const float*, const float*,
                                       float*, TY*, float*, int64_t, int, int),
                        unsigned blocks, cudaStream_t st, const void* dh, const float* ds_in, const float* s,
                        const float* gamma, const float* mean, const float* rstd, float* ds_out, void* dy_out,
                        float* part, int64_t N, int C, int W) {
  kernel<<<blocks, kBwdWarps * 32, sizeof(float) * kBwdWarps * W, st>>>(
      static_cast<const TO*>(dh), ds_in, s, gamma, mean, rstd, ds_out, static_cast<TY*>(dy_out), part, N, C, W);
}

// the smallest register row that holds C / 32 channels per lane
template <typename F>
void with_k(int C, F&& f) {
  const int K = C / 32;
  if (K <= 8) f(std::integral_constant<int, 8>{});
  else if (K <= 16)
    f(std::integral_constant<int, 16>{});
  else if (K <= 24)
    f(std::integral_constant<int, 24>{});
  else
    f(std::integral_constant<int, 32>{});
}

// y's dtype: float32, or the output's (the combinations a GPT block produces; fewer kernels to compile)
template <typename TO, typename F>
void with_same_or_float(DType y, F&& f) {
  if (y == DType::Float32) f(float{});
  else
    f(TO{});
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
      const bool vec = C % 128 == 0 && aligned16(x) && (!y || aligned16(y)) && aligned16(gamma) && aligned16(beta) &&
                       (!s_out || aligned16(s_out)) && aligned16(h);
      with_k(C, [&](auto k) {
        constexpr int kK = decltype(k)::value;  // channels per lane, rounded up
        auto launch = [&](auto kernel) {
          kernel<<<blocks, kWarps * 32, 0, st>>>(x, static_cast<const TY*>(y), gamma, beta, s_out, static_cast<TO*>(h),
                                                 mean, rstd, N, C, eps);
        };
        if (vec) launch(add_ln_fwd<TY, TO, 4, kK / 4>);
        else
          launch(add_ln_fwd<TY, TO, 1, kK>);
      });
    });
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

bool add_layer_norm_backward_supported(int C) {
  return C > 0 && C % 32 == 0 && (C % 128 == 0 ? C <= 32 * kLimitK : C <= 256);
}

namespace {
// calls f with the backward kernel the launcher runs for these dtypes and widths (vec: the 16-byte path)
template <typename F>
void with_bwd_kernel(DType h_dtype, DType y_dtype, int C, bool vec, F&& f) {
  with_type(h_dtype, [&](auto to) {
    using TO = decltype(to);
    with_same_or_float<TO>(y_dtype, [&](auto ty) {
      using TY = decltype(ty);
      if (!vec) f(add_ln_bwd<TO, TY, 1, 8>);
      else if (C <= 256)
        f(add_ln_bwd<TO, TY, 4, 2>);
      else if (C <= 512)
        f(add_ln_bwd<TO, TY, 4, 4>);
      else if (C <= 768)
        f(add_ln_bwd<TO, TY, 4, 6>);
      else
        f(add_ln_bwd<TO, TY, 4, 8>);
    });
  });
}
}  // namespace

int add_layer_norm_backward_blocks(int64_t N, int C, DType h_dtype, DType y_dtype, bool bias) {
  // one wave: as many blocks as the SMs hold at once at the kernel's register and shared-memory use (asked of the
  // runtime: 4 per SM at 128 registers, 3 at 160 — a fixed 4 made a second, partial wave where the kernel needs more),
  // fewer for small N
  int per_sm = 0;
  const size_t smem = sizeof(float) * kBwdWarps * (bias ? 3 : 2) * C;
  with_bwd_kernel(h_dtype, y_dtype, C, C % 128 == 0, [&](auto kernel) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBwdWarps * 32, smem) != cudaSuccess) per_sm = 0;
  });
  if (per_sm <= 0) per_sm = 1;
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(int64_t{per_sm} * multiprocessor_count(), (N + kBwdWarps - 1) / kBwdWarps)));
}

const char* add_layer_norm_backward(const void* dh, DType h_dtype, const float* ds_in, const float* s,
                                    const float* gamma, const float* mean, const float* rstd, float* ds_out,
                                    void* dy_out, DType y_dtype, float* part, float* dgamma_dbeta, bool bias,
                                    int blocks, int64_t N, int C, void* stream) {
  if (!add_layer_norm_backward_supported(C))
    return "add_layer_norm backward: channels must be a multiple of 128 up to 1024, or of 32 up to 256";
  auto st = static_cast<cudaStream_t>(stream);
  if (y_dtype != DType::Float32 && y_dtype != h_dtype) return "add_layer_norm: y must be float32 or the output's dtype";
  const bool vec = C % 128 == 0 && aligned16(dh) && (!ds_in || aligned16(ds_in)) && aligned16(s) && aligned16(gamma) &&
                   aligned16(ds_out) && (!dy_out || aligned16(dy_out));
  if (!vec && C > 256) return "add_layer_norm backward: tensors not 16-byte aligned";
  const int W = (bias ? 3 : 2) * C;
  if (N > 0) {
    with_bwd_kernel(h_dtype, y_dtype, C, vec, [&](auto kernel) {
      kernel_args_launch(kernel, static_cast<unsigned>(blocks), st, dh, ds_in, s, gamma, mean, rstd, ds_out, dy_out,
                         part, N, C, W);
    });
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
  } else {
    const cudaError_t err = cudaMemsetAsync(part, 0, sizeof(float) * W * blocks, st);
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  // dγ, dβ in fp32; the bias gradient rounded through y's dtype, as the stock sum of the Linear's output gradient
  return sum_partials(part, blocks, W, dgamma_dbeta, y_dtype, stream, /*round_from=*/2 * C);
}

}  // namespace ampcheck::kernels::cuda
