// cuBLASLt matrix products (kernels/gemm_epilogues.h is the ATen side): the GELU (tanh) backward applied in the
// epilogue (DGELU), an fp32 output from bf16 / fp16 operands, and accumulation into that output. Host code only: the
// GEMMs and their epilogues are cuBLASLt's kernels. The algorithm for a problem
// (shape, dtypes, epilogue, pointer alignments) is chosen once and kept: the heuristic's first choice, or with
// `autotune` the fastest of its first eight timed on the problem (not reproducible from run to run: the callers ask
// for it only where deterministic algorithms are off).
#include "kernels/kernels_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace ampcheck::kernels::cuda {
namespace {

cudaDataType lt_type(DType t) {
  return t == DType::Float32 ? CUDA_R_32F : t == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  return e == LtEpilogue::DGelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
}

uint32_t alignment(const void* p) {  // the largest power of two up to 256 that divides the address
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

thread_local std::string last_error;
const char* fail(const char* what, cublasStatus_t s) {
  last_error = std::string(what) + ": " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) + ")";
  return last_error.c_str();
}

cublasLtHandle_t handle(const char** err) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;  // one per device, kept for the process
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) {
    *err = fail("cublasLtCreate", s);
    return nullptr;
  }
  handles[dev] = h;
  return h;
}

// RAII for the descriptors of one call
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

using AlgoKey = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int, int, int, bool,
                           int64_t, uint64_t, uint64_t>;

}  // namespace

const char* gemm_lt(const LtGemm& g, void* workspace, size_t workspace_bytes, void* stream) {
  const char* err = nullptr;
  cublasLtHandle_t h = handle(&err);
  if (!h) return err;
  Descs ds;
  cublasStatus_t s;
#define LT_CHECK(call, what) \
  if ((s = (call)) != CUBLAS_STATUS_SUCCESS) return fail(what, s)
  LT_CHECK(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  const cublasLtEpilogue_t epi = lt_epilogue(g.epilogue);
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
  if (g.epilogue == LtEpilogue::DGelu) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)),
             "EPILOGUE_AUX_POINTER");
    LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g.ld_aux, sizeof(g.ld_aux)),
             "EPILOGUE_AUX_LD");
  }
  // column-major layouts: op(A) is m × k, op(B) k × n, D m × n
  LT_CHECK(cublasLtMatrixLayoutCreate(&ds.a, lt_type(g.ab_type), g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda),
           "layout A");
  LT_CHECK(cublasLtMatrixLayoutCreate(&ds.b, lt_type(g.ab_type), g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb),
           "layout B");
  LT_CHECK(cublasLtMatrixLayoutCreate(&ds.d, lt_type(g.d_type), g.m, g.n, g.ldd), "layout D");

  const uint32_t al_a = alignment(g.a), al_b = alignment(g.b), al_d = alignment(g.d);
  const AlgoKey key{static_cast<int>(epi),
                    g.m,
                    g.n,
                    g.k,
                    g.trans_a,
                    g.trans_b,
                    g.lda,
                    g.ldb,
                    g.ldd,
                    static_cast<int>(g.ab_type),
                    static_cast<int>(g.d_type),
                    static_cast<int>(al_a | (al_b << 9)),
                    g.accumulate,
                    g.ld_aux,
                    uint64_t{al_d},
                    (uint64_t{g.autotune} << 32) | alignment(g.aux)};
  static std::mutex mu;
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = algos.find(key);
    if (it != algos.end()) {
      algo = it->second;
    } else {
      LT_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref), "cublasLtMatmulPreferenceCreate");
      const uint64_t ws = workspace_bytes;
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "MAX_WORKSPACE_BYTES");
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                    sizeof(al_a)),
               "MIN_ALIGNMENT_A");
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                    sizeof(al_b)),
               "MIN_ALIGNMENT_B");
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                    sizeof(al_d)),
               "MIN_ALIGNMENT_C");
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                    sizeof(al_d)),
               "MIN_ALIGNMENT_D");
      constexpr int kCandidates = 8;
      cublasLtMatmulHeuristicResult_t res[kCandidates]{};
      int found = 0;
      LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, g.autotune ? kCandidates : 1,
                                              res, &found),
               "cublasLtMatmulAlgoGetHeuristic");
      if (found == 0) {
        last_error = "cuBLASLt has no algorithm for this product and epilogue (m " + std::to_string(g.m) + ", n " +
                     std::to_string(g.n) + ", k " + std::to_string(g.k) + ", epilogue " + std::to_string(epi) + ")";
        return last_error.c_str();
      }
      algo = res[0].algo;
      // autotune: time the heuristic's candidates on this very problem (each writes only D and the epilogue's
      // outputs, which the real run below rewrites; never with accumulate, never while a CUDA graph is captured)
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing);
      if (g.autotune && found > 1 && !g.accumulate && capturing == cudaStreamCaptureStatusNone) {
        cudaEvent_t t0, t1;
        cudaEventCreate(&t0);
        cudaEventCreate(&t1);
        const float one = 1.0f, zero = 0.0f;
        float best = 1e30f;
        for (int c = 0; c < found; ++c) {
          bool ok = true;
          for (int rep = 0; rep < 3 && ok; ++rep) {  // the first run warms up, the other two are timed
            if (rep == 1) cudaEventRecord(t0, static_cast<cudaStream_t>(stream));
            ok = cublasLtMatmul(h, ds.op, &one, g.a, ds.a, g.b, ds.b, &zero, g.d, ds.d, g.d, ds.d, &res[c].algo,
                                workspace, workspace_bytes, static_cast<cudaStream_t>(stream)) == CUBLAS_STATUS_SUCCESS;
          }
          if (!ok) continue;
          cudaEventRecord(t1, static_cast<cudaStream_t>(stream));
          cudaEventSynchronize(t1);
          float ms = 0;
          cudaEventElapsedTime(&ms, t0, t1);
          if (ms < best) best = ms, algo = res[c].algo;
        }
        cudaEventDestroy(t0);
        cudaEventDestroy(t1);
      }
      algos.emplace(key, algo);
    }
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  LT_CHECK(cublasLtMatmul(h, ds.op, &alpha, g.a, ds.a, g.b, ds.b, &beta, g.d, ds.d, g.d, ds.d, &algo, workspace,
                          workspace_bytes, static_cast<cudaStream_t>(stream)),
           "cublasLtMatmul");
#undef LT_CHECK
  return nullptr;
}

}  // namespace ampcheck::kernels::cuda
