// The CUDA C++ kernels' launchers: plain C++ signatures (raw pointers, a cudaStream_t passed as void*), so neither
// side includes the other's headers. Each returns nullptr or the CUDA error's text. Only the ops' .cpp files
// beside them (through kernels/dispatch.h) and gemm_epilogues.cpp call them.
#pragma once

#include <cstdint>

namespace ampcheck::kernels::cuda {

enum class DType { Float32, Float16, BFloat16 };

// See cross_entropy_rows.cu. logits: rows × V with row stride ld (elements), modified in place; targets: rows int64;
// row_loss: rows fp32 (written); factor: one fp32 on the device.
const char* cross_entropy_rows(void* logits, DType dtype, int64_t rows, int64_t V, int64_t ld, const int64_t* targets,
                               float* row_loss, const float* factor, int64_t ignore_index, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See layer_norm.cu. Row-major (N, C), contiguous. y may be null (no residual add; s_out is then null too: s = x);
// dy_out may be null (no branch to return a gradient to). C % 32 == 0, C <= 1024.
const char* add_layer_norm_forward(const float* x, const void* y, DType y_dtype, const float* gamma, const float* beta,
                                   float* s_out, void* h, DType h_dtype, float* mean, float* rstd, int64_t N, int C,
                                   float eps, void* stream);
// Whether the backward kernel takes C channels: a multiple of 128 up to 1024, or of 32 up to 256.
bool add_layer_norm_backward_supported(int C);
// How many blocks (rows of `part`, each 2C fp32: [dγ | dβ] partial sums, 3C with the bias: [dγ | dβ | Σ dy])
// add_layer_norm_backward uses for N rows of C channels in these dtypes: one wave at the kernel's occupancy (asked of
// the CUDA runtime).
int add_layer_norm_backward_blocks(int64_t N, int C, DType h_dtype, DType y_dtype, bool bias);
// Writes ds_out (fp32), dy_out (y's dtype; may be null) and dgamma_dbeta (2C fp32: dγ then dβ; with bias 3C: then the
// column sums of dy as written in y's dtype, fp32 accumulation, rounded through y's dtype — the bias gradient of the
// Linear whose output y is), using `part` as scratch. Pointers 16-byte aligned where C > 256.
const char* add_layer_norm_backward(const void* dh, DType h_dtype, const float* ds_in, const float* s,
                                    const float* gamma, const float* mean, const float* rstd, float* ds_out,
                                    void* dy_out, DType y_dtype, float* part, float* dgamma_dbeta, bool bias,
                                    int blocks, int64_t N, int C, void* stream);

// The current device's multiprocessor count (132 if it cannot be read), read once.
int multiprocessor_count();

// See column_sums.cu. out[c] = Σ_b part[b · C + c] over b < P in a fixed order, written as fp32; columns c ≥ round_from
// rounded through `round_through` first (the value a sum in that dtype would return, widened back to fp32).
const char* sum_partials(const float* part, int64_t P, int64_t C, float* out, DType round_through, void* stream,
                         int64_t round_from = 0);
// How many row blocks (rows of `part`, each C fp32) column_sums uses for an (N, C) matrix.
int column_sum_row_blocks(int64_t N, int64_t C);
// Column sums of g (N, C) row-major, contiguous, in `dtype` (fp32 accumulation), written to out (C, fp32) rounded
// through `dtype` (what g.sum(0) returns in g's dtype). With pre non-null: g is first replaced by the GELU (tanh)
// backward dpre = g · gelu'(pre), written to dpre in `dtype`, and the column sums are those of the written dpre.
// part: column_sum_row_blocks(N, C) × C fp32 scratch.
const char* column_sums(const void* g, const void* pre, void* dpre, DType dtype, float* part, int row_blocks,
                        float* out, int64_t N, int64_t C, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See gemm_lt.cu: one cuBLASLt product D (m × n) = op(A) op(B) (+ D when accumulate), column-major, fp32 compute,
// with an epilogue. Whether this build links cuBLASLt is gemm_epilogues.h's gemm_epilogues_built().
enum class LtEpilogue {
  None,
  DGelu,  // D = op(A) op(B) · GELU'(aux), GELU (tanh)'s derivative at aux (D's dtype, m × n column-major)
};
struct LtGemm {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  DType ab_type = DType::BFloat16;
  void* d = nullptr;
  int64_t ldd = 0;
  DType d_type = DType::BFloat16;
  bool accumulate = false;
  LtEpilogue epilogue = LtEpilogue::None;
  const void* aux = nullptr;  // DGelu: read
  int64_t ld_aux = 0;
  bool autotune = false;  // time the heuristic's candidates once per problem, keep the fastest (see gemm_lt.cu)
};
const char* gemm_lt(const LtGemm& g, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See casts.cu. cast_many: dst[t] (numel[t] elements of dst_dtype, fp16 or bf16) = src[t] (fp32) rounded to nearest
// even, for every t < count, in one launch per kMaxCastTensors tensors.
constexpr int kMaxCastTensors = 128;
const char* cast_many(const float* const* src, void* const* dst, const int64_t* numel, int count, DType dst_dtype,
                      void* stream);
// out (n fp32) = parts[0] + parts[1] + … (each n elements of part_dtype, fp16 or bf16), added in part order in fp32.
constexpr int kMaxWidenParts = 8;
const char* widen_sum(const void* const* parts, int count, DType part_dtype, float* out, int64_t n, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See embedding_rows.cu. grad (V × C fp32, row-major) += the rows (N × C fp32, row-major, 16-byte aligned) of the
// positions order[0..N) grouped by token: sorted (N int32) is the stable sort of the tokens, order the positions in
// that order. scratch: embedding_rows_scratch(N, C) fp32, 16-byte aligned. Tokens outside [0, V) are skipped.
// C % 4 == 0, C <= 4096.
int64_t embedding_rows_scratch(int64_t N, int C);
const char* embedding_rows_add(const int32_t* sorted, const int64_t* order, const float* rows, float* grad,
                               float* scratch, int64_t N, int C, int64_t V, void* stream);
// x (n elements of dtype) *= *r (one fp32 on the device), unless *r == 1: then x is not touched.
const char* scale_unless_one(void* x, DType dtype, int64_t n, const float* r, void* stream);

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels::cuda {

// See square_sums.cu. square_sums: for `count` tensors of `dtype` (src[t]: numel[t] elements, contiguous), one partial
// sum of squares (fp32) and one non-finite flag (int 0 / 1) per block into part_sum / part_bad, which hold
// square_sums_blocks(numel, count) entries. square_sums_total: out_sum = the partials added in a fixed order (fp64,
// rounded to fp32), out_found = 1.f where any flag is set, else 0.f — both one fp32 on the device.
// The partition of a tensor that square_sums and adamw_square_sums share (their partials are the same sums only while
// both use it): blocks of kSquareSumThreads threads, 8 elements per thread and step, 4 steps.
constexpr int kSquareSumThreads = 256;
constexpr int64_t kSquareSumBlockElems = int64_t{kSquareSumThreads} * 8 * 4;
int64_t square_sums_blocks(const int64_t* numel, int count);
const char* square_sums(const void* const* src, const int64_t* numel, int count, DType dtype, float* part_sum,
                        int* part_bad, void* stream);
const char* square_sums_total(const float* part_sum, const int* part_bad, int64_t P, float* out_sum, float* out_found,
                              void* stream);  // part_bad may be null: out_found 0

// See adamw.cu. adamw_square_sums: _fused_adamw_'s update (decoupled weight decay, no amsgrad, no maximize) of `count`
// fp32 tensors (p, g, m, v: numel[t] elements each, contiguous; step[t]: the tensor's step count, one fp32 on the
// device, read), and each updated parameter's partial sums of squares — square_sums' partials of it — into
// part_sum[part_first[t] ..+ square_sums_blocks(&numel[t], 1)); one launch per kAdamTensors tensors.
constexpr int kAdamTensors = 48;
struct AdamTensors {
  float* const* p;
  float* const* g;
  float* const* m;
  float* const* v;
  const float* const* step;
  const int64_t* numel;
  const int64_t* part_first;
};
struct AdamHyper {
  const float* lr_ptr = nullptr;  // where given, the learning rate is read there (on the device), else lr
  float lr = 0, beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  const float* grad_scale = nullptr;  // where given, grads are divided by it and the unscaled grads stored
  const float* found_inf = nullptr;   // where it holds 1, nothing is updated (the sums are still written)
};
// gpart_sum (may be null; only without grad_scale): the grads' partial sums of squares, in part_sum's layout.
const char* adamw_square_sums(const AdamTensors& ts, int count, const AdamHyper& h, float* part_sum, float* gpart_sum,
                              void* stream);

}  // namespace ampcheck::kernels::cuda
