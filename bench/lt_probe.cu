// cuBLASLt probe: which kernels cuBLASLt offers, and how fast each runs, for the GPT-2 MLP's c_proj input-gradient
// GEMM with the DGELU epilogue (and the same product without it) in every operand layout; with `wgrad`, for a
// weight-gradient product with an fp32 output (see wgrad_probe). A measurement tool for
// docs/PERFORMANCE.md, not part of the engine: `bash bench/lt_probe.sh` builds and runs it on a CUDA machine.
//
// The product: d (N × H) = g (N × C2) · w (C2 × H), then d ⊙ GELU'(pre) (pre: N × H), bf16 operands and output,
// fp32 accumulation. cuBLASLt is column-major; "rows" below means the layout the engine holds (row-major):
//   orient 0 (the engine's): D col-major H × N (= row-major N × H): m = H, n = N; A = w, B = g
//   orient 1: D col-major N × H (= row-major H × N, the transposed activations): m = N, n = H; A = g, B = w
// For each orientation, each of A / B stored as op N or T (the data are random: only the speed is read).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// A failed CUDA or cuBLASLt call ends the probe with the call and the library's name for the error.
inline void check(bool ok, const char* call, const char* error) {
  if (ok) return;
  std::fprintf(stderr, "%s: %s\n", call, error);
  std::exit(1);
}
inline const char* error_name(cudaError_t e) { return cudaGetErrorString(e); }
inline const char* error_name(cublasStatus_t s) { return cublasLtGetStatusName(s); }
#define CK(x) do { const cudaError_t e_ = (x); check(e_ == cudaSuccess, #x, error_name(e_)); } while (0)
#define LK(x) do { const cublasStatus_t s_ = (x); check(s_ == CUBLAS_STATUS_SUCCESS, #x, error_name(s_)); } while (0)

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((float(x & 0xffff) / 65536.f - 0.5f) * 0.2f);
  }
}

template <typename T>
int attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t which) {
  T v{};
  size_t w = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, which, &v, sizeof(v), &w) != CUBLAS_STATUS_SUCCESS) return -1;
  return int(v);
}

// What every probe shares: the handle, a 64 MiB workspace, a stream and two events; D = op(A) op(B) with an algorithm.
struct Probe {
  cublasLtHandle_t h;
  void* ws;
  const size_t ws_bytes = size_t{64} << 20;
  cudaStream_t st;
  cudaEvent_t t0, t1;
  Probe() {
    LK(cublasLtCreate(&h));
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaStreamCreate(&st));
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
  }
  bool run(cublasLtMatmulDesc_t op, const void* A, cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb,
           void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t& algo) {
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(h, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &algo, ws, ws_bytes, st) == CUBLAS_STATUS_SUCCESS;
  }
  // cuBLASLt's first kMaxCandidates algorithms for the product (within this workspace) into res; how many
  static constexpr int kMaxCandidates = 32;
  int candidates(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                 cublasLtMatmulHeuristicResult_t* res, cublasStatus_t* status) {
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = ws_bytes;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    int found = 0;
    *status = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, kMaxCandidates, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return *status == CUBLAS_STATUS_SUCCESS ? found : 0;
  }
  // about a second of products, so the timings after it run at the clock the power limit holds
  void warm(cublasLtMatmulDesc_t op, const void* A, cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb,
            void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t& algo) {
    for (int i = 0; i < 2000; ++i) run(op, A, la, B, lb, D, ld, algo);
    CK(cudaStreamSynchronize(st));
  }
  // µs per product over `reps` back-to-back runs (negative where cuBLASLt refuses the algorithm)
  float time_us(cublasLtMatmulDesc_t op, const void* A, cublasLtMatrixLayout_t la, const void* B,
                cublasLtMatrixLayout_t lb, void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t& algo, int reps) {
    if (!run(op, A, la, B, lb, D, ld, algo)) return -1.f;
    CK(cudaEventRecord(t0, st));
    for (int r = 0; r < reps; ++r) run(op, A, la, B, lb, D, ld, algo);
    CK(cudaEventRecord(t1, st));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    return ms * 1000.f / reps;
  }
};

int wgrad_probe(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "wgrad") return wgrad_probe(argc - 1, argv + 1);
  const int64_t N = argc > 1 ? atoll(argv[1]) : 16384, H = argc > 2 ? atoll(argv[2]) : 3072,
                C2 = argc > 3 ? atoll(argv[3]) : 768;
  const int reps = argc > 4 ? atoi(argv[4]) : 100;
  Probe pr;
  __nv_bfloat16 *g, *w, *pre, *d;
  CK(cudaMalloc(&g, N * C2 * 2));
  CK(cudaMalloc(&w, C2 * H * 2));
  CK(cudaMalloc(&pre, N * H * 2));
  CK(cudaMalloc(&d, N * H * 2));
  fill<<<1024, 256>>>(g, N * C2, 1);
  fill<<<1024, 256>>>(w, C2 * H, 2);
  fill<<<1024, 256>>>(pre, N * H, 3);
  const double flop = 2.0 * double(N) * double(H) * double(C2);

  bool warmed = false;  // (Probe::warm before the first timing)
  std::printf("N %lld H %lld C2 %lld, %d reps per candidate; TFLOP/s counts 2*N*H*C2\n", (long long)N, (long long)H,
              (long long)C2, reps);
  std::printf("epilogue orient opA opB | rank TFLOP/s us algo tile stages cluster splitk swizzle\n");
  for (int epi_i = 0; epi_i < 2; ++epi_i) {
    const cublasLtEpilogue_t epi = epi_i == 0 ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    for (int orient = 0; orient < 2; ++orient) {
      for (int ta_i = 0; ta_i < 2; ++ta_i) {
        for (int tb_i = 0; tb_i < 2; ++tb_i) {
          const int64_t m = orient == 0 ? H : N, n = orient == 0 ? N : H, k = C2;
          const cublasOperation_t ta = ta_i ? CUBLAS_OP_T : CUBLAS_OP_N, tb = tb_i ? CUBLAS_OP_T : CUBLAS_OP_N;
          const void* A = orient == 0 ? (const void*)w : (const void*)g;
          const void* B = orient == 0 ? (const void*)g : (const void*)w;
          cublasLtMatmulDesc_t op;
          LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
          LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
          LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
          LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
          if (epi == CUBLASLT_EPILOGUE_DGELU) {
            const int64_t ld_aux = m;
            LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof(pre)));
            LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
          }
          cublasLtMatrixLayout_t la, lb, ld;
          LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta_i ? k : m, ta_i ? m : k, ta_i ? k : m));
          LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb_i ? n : k, tb_i ? k : n, tb_i ? n : k));
          LK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
          cublasLtMatmulHeuristicResult_t res[Probe::kMaxCandidates]{};
          cublasStatus_t hs;
          const int found = pr.candidates(op, la, lb, ld, res, &hs);
          const char* epi_name = epi_i == 0 ? "dgelu" : "plain";
          if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
            std::printf("%s %d %c %c | none (%s)\n", epi_name, orient, ta_i ? 'T' : 'N', tb_i ? 'T' : 'N',
                        cublasLtGetStatusName(hs));
          } else {
            if (!warmed) {
              pr.warm(op, A, la, B, lb, d, ld, res[0].algo);
              warmed = true;
            }
            struct Row { float us; int c; };
            std::vector<Row> rows;
            for (int c = 0; c < found; ++c)
              if (const float us = pr.time_us(op, A, la, B, lb, d, ld, res[c].algo, reps); us >= 0) rows.push_back({us, c});
            std::vector<Row> sorted = rows;
            std::sort(sorted.begin(), sorted.end(), [](const Row& x, const Row& y) { return x.us < y.us; });
            for (size_t r = 0; r < sorted.size() && r < 3; ++r) {
              const auto& a = res[sorted[r].c].algo;
              std::printf("%s %d %c %c | %zu(h%d of %d) %.0f %.1f %d %d %d %d %d %d\n", epi_name, orient,
                          ta_i ? 'T' : 'N', tb_i ? 'T' : 'N', r, sorted[r].c, found, flop / (sorted[r].us * 1e6),
                          sorted[r].us, attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
                          attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID), attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                          attr<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                          attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                          attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
            }
            if (!rows.empty())
              std::printf("%s %d %c %c | heuristic's first: %.1f us\n", epi_name, orient, ta_i ? 'T' : 'N',
                          tb_i ? 'T' : 'N', rows.front().c == 0 ? rows.front().us : -1.f);
          }
          fflush(stdout);
          cublasLtMatrixLayoutDestroy(la);
          cublasLtMatrixLayoutDestroy(lb);
          cublasLtMatrixLayoutDestroy(ld);
          cublasLtMatmulDescDestroy(op);
        }
      }
    }
  }
  return 0;
}

// `lt_probe wgrad IN OUT ROWS [reps]`: the engine's weight-gradient product (kernels/gemm_epilogues.cpp wgrad_into):
// column-major dwᵀ (IN × OUT, fp32) = xᵀ (IN × ROWS) · g (ROWS × OUT), x and g bf16 row-major — every candidate of
// cuBLASLt's first 32, timed, the heuristic's rank beside each (the engine times the first 8).
int wgrad_probe(int argc, char** argv) {
  const int64_t IN = argc > 1 ? atoll(argv[1]) : 768, OUT = argc > 2 ? atoll(argv[2]) : 768,
                R = argc > 3 ? atoll(argv[3]) : 16384;
  const int reps = argc > 4 ? atoi(argv[4]) : 100;
  Probe pr;
  __nv_bfloat16 *x, *g;
  float* d;
  CK(cudaMalloc(&x, IN * R * 2));
  CK(cudaMalloc(&g, OUT * R * 2));
  CK(cudaMalloc(&d, IN * OUT * 4));
  fill<<<1024, 256>>>(x, IN * R, 1);
  fill<<<1024, 256>>>(g, OUT * R, 2);
  const double flop = 2.0 * double(IN) * double(OUT) * double(R);
  cublasLtMatmulDesc_t op;
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, ld;
  LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, IN, R, IN));
  LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, OUT, R, OUT));
  LK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, IN, OUT, IN));
  cublasLtMatmulHeuristicResult_t res[Probe::kMaxCandidates]{};
  cublasStatus_t hs;
  const int found = pr.candidates(op, la, lb, ld, res, &hs);
  LK(hs);
  if (found > 0) pr.warm(op, x, la, g, lb, d, ld, res[0].algo);
  std::printf("wgrad IN %lld OUT %lld ROWS %lld (fp32 out), %d candidates, %d reps each\n", (long long)IN,
              (long long)OUT, (long long)R, found, reps);
  std::printf("heuristic rank | TFLOP/s us algo tile stages cluster splitk\n");
  for (int c = 0; c < found; ++c) {
    const float us = pr.time_us(op, x, la, g, lb, d, ld, res[c].algo, reps);
    if (us < 0) continue;
    const auto& a = res[c].algo;
    std::printf("%d | %.0f %.1f %d %d %d %d %d\n", c, flop / (us * 1e6), us, attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
                attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID), attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                attr<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  }
  return 0;
}
