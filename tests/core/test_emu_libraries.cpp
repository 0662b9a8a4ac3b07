// The emulated device's cuBLAS and cuBLASLt (core/cuda/emu/cublas.cpp, cublaslt.cpp; NCCL is in
// test_emu_nccl.cpp), called directly as keel calls the real libraries and checked against a naive f64
// reference computed from the values actually stored (after f16/bf16 rounding). Padding between
// columns (ld > rows) and C under beta = 0 hold NaN, so a read of either shows in the result.
// Only the emulated build has these stand-ins (device pointers are host memory there, so host
// vectors serve as device buffers).
#ifdef KEEL_CUDA_EMULATED
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "emu_typed_elements.h"

namespace {

// A batch of column-major (rows, cols) matrices of one CUDA type, `stride` elements apart, in
// float-aligned host storage; every element outside the matrices is NaN.
struct Matrix {
  cudaDataType_t type;
  int64_t rows, cols, ld, batch, stride;
  std::vector<float> storage;

  Matrix(cudaDataType_t t, int64_t r, int64_t c, int64_t ld_, int64_t nb = 1, int64_t stride_ = -1)
      : type(t), rows(r), cols(c), ld(ld_), batch(nb), stride(stride_ < 0 ? ld_ * c : stride_) {
    const int64_t n = stride * (batch - 1) + ld * cols + 1;
    storage.assign(static_cast<size_t>(t == CUDA_R_32F ? n : (n + 1) / 2), 0.0f);
    for (int64_t i = 0; i < n; ++i) put(i, NAN);
  }
  void* data() { return storage.data(); }
  int64_t index(int64_t b, int64_t i, int64_t j) const { return b * stride + i + j * ld; }
  float at(int64_t i) const { return keel::testing::typed_at(type, storage.data(), i); }
  void put(int64_t i, float v) { keel::testing::typed_put(type, storage.data(), i, v); }
  float get(int64_t b, int64_t i, int64_t j) const { return at(index(b, i, j)); }
  void set(int64_t b, int64_t i, int64_t j, float v) { put(index(b, i, j), v); }
  Matrix& randomize(uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t b = 0; b < (stride == 0 ? 1 : batch); ++b)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < rows; ++i) set(b, i, j, u(gen));
    return *this;
  }
};

// Half the spacing of representable numbers near 1 in the output type: its rounding error.
double output_eps(cudaDataType_t t) { return t == CUDA_R_16F ? 0x1p-11 : t == CUDA_R_16BF ? 0x1p-8 : 0.0; }

// Every D (m, n) of the batch against alpha op(A) op(B) + beta C + bias in f64. The bound allows f32
// accumulation over k terms (k + 4 roundings of at most 2^-24 of sum |terms|) plus the output's
// own rounding. Padding rows of D (ld > m) must still be NaN: nothing wrote there.
void check_gemm(cublasOperation_t ta, cublasOperation_t tb, float alpha, const Matrix& A, const Matrix& B, float beta,
                const Matrix& C, const Matrix& D, const std::vector<float>& bias = {}) {
  const int64_t m = D.rows, n = D.cols, k = ta == CUBLAS_OP_N ? A.cols : A.rows;
  int worst_row = -1;
  double worst = 0.0;
  for (int64_t b = 0; b < D.batch; ++b)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        double ref = 0.0, bound = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double a = ta == CUBLAS_OP_N ? A.get(A.stride ? b : 0, i, p) : A.get(A.stride ? b : 0, p, i);
          const double bv = tb == CUBLAS_OP_N ? B.get(B.stride ? b : 0, p, j) : B.get(B.stride ? b : 0, j, p);
          ref += a * bv, bound += std::fabs(a * bv);
        }
        ref *= alpha, bound *= std::fabs(alpha);
        if (beta != 0.0f) ref += beta * double(C.get(b, i, j)), bound += std::fabs(beta * double(C.get(b, i, j)));
        if (!bias.empty()) ref += bias[static_cast<size_t>(i)], bound += std::fabs(bias[static_cast<size_t>(i)]);
        const double got = D.get(b, i, j);
        const double smallest_normal = D.type == CUDA_R_16F ? 0x1p-14 : 0x1p-126;  // below: fixed spacing
        const double tol =
            double(k + 4) * 0x1p-24 * bound + output_eps(D.type) * std::max(std::fabs(ref), smallest_normal) + 1e-30;
        const double err = std::isfinite(got) ? std::fabs(got - ref) / tol : INFINITY;
        if (err > worst) worst = err, worst_row = static_cast<int>(i);
      }
      for (int64_t i = m; i < D.ld; ++i) CHECK(std::isnan(D.at(D.index(b, i, j))));
    }
  INFO("worst error / tolerance " << worst << " at row " << worst_row);
  CHECK(worst <= 1.0);
}

constexpr float kOne = 1.0f;

struct Blas {
  cublasHandle_t h = nullptr;
  Blas() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Blas() { cublasDestroy(h); }
};

cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, float alpha, Matrix& A, Matrix& B,
                       float beta, Matrix& C, cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
  const int k = int(ta == CUBLAS_OP_N ? A.cols : A.rows);
  return cublasGemmEx(h, ta, tb, int(C.rows), int(C.cols), k, &alpha, A.data(), A.type, int(A.ld), B.data(), B.type,
                      int(B.ld), &beta, C.data(), C.type, int(C.ld), compute, CUBLAS_GEMM_DEFAULT);
}

// The stored matrix whose op is (rows, cols), random, with 3 rows of padding.
Matrix operand(cudaDataType_t t, cublasOperation_t op, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t r = op == CUBLAS_OP_N ? rows : cols, c = op == CUBLAS_OP_N ? cols : rows;
  Matrix x(t, r, c, r + 3);
  x.randomize(seed);
  return x;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("emulated cublasGemmEx: every transpose pair, non-square, padded, beta zero and not") {
    Blas blas;
    const int64_t m = 37, n = 23, k = 19;
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C})
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C})
        for (float beta : {0.0f, 0.75f}) {
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(beta);
          Matrix A = operand(CUDA_R_32F, ta, m, k, 1), B = operand(CUDA_R_32F, tb, k, n, 2);
          Matrix C(CUDA_R_32F, m, n, m + 5);
          if (beta != 0.0f) C.randomize(3);  // else all NaN: beta = 0 must not read C
          const Matrix C0 = C;
          REQUIRE(gemm_ex(blas.h, ta, tb, 1.5f, A, B, beta, C) == CUBLAS_STATUS_SUCCESS);
          check_gemm(ta, tb, 1.5f, A, B, beta, C0, C);
        }
  }

  TEST_CASE("emulated cublasGemmEx: f16 and bf16 operands, f32 accumulation, rounded outputs") {
    Blas blas;
    const cudaDataType_t pairs[][2] = {
        {CUDA_R_16F, CUDA_R_16F}, {CUDA_R_16F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
    for (const auto& tc : pairs) {
      CAPTURE(tc[0]);
      CAPTURE(tc[1]);
      Matrix A = operand(tc[0], CUBLAS_OP_T, 29, 64, 4), B = operand(tc[0], CUBLAS_OP_N, 64, 17, 5);
      Matrix C(tc[1], 29, 17, 31);
      C.randomize(6);
      const Matrix C0 = C;
      REQUIRE(gemm_ex(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, 1.0f, A, B, 0.5f, C) == CUBLAS_STATUS_SUCCESS);
      check_gemm(CUBLAS_OP_T, CUBLAS_OP_N, 1.0f, A, B, 0.5f, C0, C);
    }
  }

  TEST_CASE("emulated cublasGemmEx rounds f16 and bf16 outputs to nearest even") {
    Blas blas;
    // 1 + 1*u/2 is a tie between 1 and 1 + u (u: the spacing at 1): even is 1. 1 + 3u/2 is a tie
    // between 1 + u and 1 + 2u: even is 1 + 2u. The f32 sums themselves are exact.
    for (auto [t, u] : {std::pair{CUDA_R_16F, 0x1p-10f}, std::pair{CUDA_R_16BF, 0x1p-7f}}) {
      CAPTURE(t);
      Matrix A(t, 2, 2, 2), B(t, 2, 1, 2), C(t, 2, 1, 2);
      A.set(0, 0, 0, 1.0f), A.set(0, 0, 1, 1.0f), A.set(0, 1, 0, 1.0f), A.set(0, 1, 1, 3.0f);
      B.set(0, 0, 0, 1.0f), B.set(0, 1, 0, u / 2);
      REQUIRE(gemm_ex(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS);
      CHECK(C.get(0, 0, 0) == 1.0f);
      CHECK(C.get(0, 1, 0) == 1.0f + 2 * u);
    }
  }

  TEST_CASE("emulated cublasGemmEx: the TF32 math mode rounds f32 operands, the default does not") {
    Blas blas;
    Matrix A(CUDA_R_32F, 1, 1, 1), B(CUDA_R_32F, 1, 1, 1), C(CUDA_R_32F, 1, 1, 1);
    A.set(0, 0, 0, 1.0f + 0x1p-12f), B.set(0, 0, 0, 1.0f);
    REQUIRE(gemm_ex(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS);
    CHECK(C.get(0, 0, 0) == 1.0f + 0x1p-12f);
    REQUIRE(cublasSetMathMode(blas.h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(gemm_ex(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS);
    CHECK(C.get(0, 0, 0) == 1.0f);  // TF32 keeps 10 mantissa bits
    REQUIRE(gemm_ex(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C, CUBLAS_COMPUTE_32F_PEDANTIC) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(C.get(0, 0, 0) == 1.0f + 0x1p-12f);
  }

  TEST_CASE("emulated cublasGemmStridedBatchedEx: strides, a stride-0 operand shared by the batch") {
    Blas blas;
    const int64_t m = 12, n = 9, k = 14, nb = 3;
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF}) {
      CAPTURE(t);
      Matrix A(t, k, m, k + 2, nb, 0);                // op T, one matrix for every batch entry
      Matrix B(t, k, n, k + 1, nb, (k + 1) * n + 7);  // gaps between matrices
      Matrix C(t, m, n, m + 1, nb, (m + 1) * n + 5);
      A.randomize(7), B.randomize(8);
      const float alpha = 0.5f, beta = 0.0f;
      REQUIRE(cublasGemmStridedBatchedEx(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(n), int(k), &alpha, A.data(), t,
                                         int(A.ld), 0, B.data(), t, int(B.ld), B.stride, &beta, C.data(), t, int(C.ld),
                                         C.stride, int(nb), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      check_gemm(CUBLAS_OP_T, CUBLAS_OP_N, alpha, A, B, beta, C, C);
      for (int64_t b = 0; b + 1 < nb; ++b)  // the gap after each matrix of C is untouched
        CHECK(std::isnan(C.at(C.index(b, 0, n))));
    }
  }

  TEST_CASE("emulated cublasGemmEx and cublasGemmStridedBatchedEx refuse what cuBLAS refuses") {
    Blas blas;
    Matrix A(CUDA_R_32F, 8, 8, 8), B(CUDA_R_32F, 8, 8, 8), C(CUDA_R_32F, 8, 8, 8);
    auto call = [&](cublasOperation_t ta, int m, int n, int k, int lda, int ldb, int ldc, const float* alpha = &kOne,
                    cudaDataType_t ct = CUDA_R_32F, cublasComputeType_t ctype = CUBLAS_COMPUTE_32F) {
      return cublasGemmEx(blas.h, ta, CUBLAS_OP_N, m, n, k, alpha, A.data(), CUDA_R_32F, lda, B.data(), CUDA_R_32F, ldb,
                          &kOne, C.data(), ct, ldc, ctype, CUBLAS_GEMM_DEFAULT);
    };
    CHECK(call(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4) == CUBLAS_STATUS_SUCCESS);
    CHECK(call(CUBLAS_OP_N, -1, 4, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(call(CUBLAS_OP_N, 4, 4, -1, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(call(CUBLAS_OP_N, 4, 4, 6, 3, 6, 4) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m for op N
    CHECK(call(CUBLAS_OP_T, 4, 4, 6, 4, 6, 4) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k for op T
    CHECK(call(CUBLAS_OP_N, 4, 4, 6, 4, 5, 4) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
    CHECK(call(CUBLAS_OP_N, 4, 4, 4, 4, 4, 3) == CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
    CHECK(call(CUBLAS_OP_N, 0, 4, 4, 0, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);  // ld >= 1 even when empty
    CHECK(call(CUBLAS_OP_N, 0, 4, 4, 1, 4, 1) == CUBLAS_STATUS_SUCCESS);
    CHECK(call(static_cast<cublasOperation_t>(7), 4, 4, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(call(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(call(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, &kOne, CUDA_R_16F) == CUBLAS_STATUS_NOT_SUPPORTED);  // f32 A, f16 C
    CHECK(call(CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, &kOne, CUDA_R_32F, CUBLAS_COMPUTE_64F) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &kOne, A.data(), CUDA_R_32F, 4, B.data(), CUDA_R_32F,
                       4, &kOne, C.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(cublasGemmStridedBatchedEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &kOne, A.data(), CUDA_R_32F, 4, 16,
                                     B.data(), CUDA_R_32F, 4, 16, &kOne, C.data(), CUDA_R_32F, 4, 16, -1,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSetMathMode(blas.h, static_cast<cublasMath_t>(5)) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSetWorkspace(blas.h, reinterpret_cast<char*>(A.data()) + 4, 64) == CUBLAS_STATUS_INVALID_VALUE);
  }

  // As ops/cuda/matmul.cu's linear_lt calls it: out (R, N) = x (R, K) w (N, K)^T + bias (N), all
  // row-major, seen column-major as out^T (N x R) = op_T(w as K x N) (x^T as K x R) + bias.
  TEST_CASE("emulated cublasLtMatmul with the bias epilogue, as linear calls it") {
    cublasLtHandle_t lt = nullptr;
    REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
    const int64_t R = 21, K = 40, N = 13;
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
      CAPTURE(t);
      Matrix w(t, K, N, K), x(t, K, R, K), out(t, N, R, N), bias(t, N, 1, N);
      w.randomize(9), x.randomize(10), bias.randomize(11);
      std::vector<float> bias_values;
      for (int64_t i = 0; i < N; ++i) bias_values.push_back(bias.get(0, i, 0));
      cublasLtMatmulDesc_t op = nullptr;
      cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
      cublasLtMatmulPreference_t pref = nullptr;
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const void* bias_ptr = bias.data();
      const int32_t bias_type = t;
      REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
              CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr) ==
              CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 2) == CUBLAS_STATUS_INVALID_VALUE);
      REQUIRE(cublasLtMatrixLayoutCreate(&a, t, K, N, K) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatrixLayoutCreate(&b, t, K, R, K) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatrixLayoutCreate(&c, t, N, R, N) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
      const uint64_t ws = 1 << 20;
      const uint32_t align = 16;
      REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
              CUBLAS_STATUS_SUCCESS);
      for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align) == CUBLAS_STATUS_SUCCESS);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      REQUIRE(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &result, &found) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(found == 1);
      CHECK(result.state == CUBLAS_STATUS_SUCCESS);
      const float alpha = 1.0f, beta = 0.0f;
      REQUIRE(cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, out.data(), c, out.data(), c,
                             &result.algo, nullptr, ws, nullptr) == CUBLAS_STATUS_SUCCESS);
      check_gemm(CUBLAS_OP_T, CUBLAS_OP_N, alpha, w, x, beta, out, out, bias_values);

      // Refusals, each as cuBLASLt gives it.
      int none = 0;
      CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 0, &result, &none) == CUBLAS_STATUS_INVALID_VALUE);
      CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, b, b, c, c, pref, 1, &result, &none) ==
            CUBLAS_STATUS_INVALID_VALUE);  // op(A) is R x K, but D has N rows
      const uint32_t tiny = 1;             // below the element size: no algorithm can take it
      cublasLtMatmulPreference_t loose = nullptr;
      REQUIRE(cublasLtMatmulPreferenceCreate(&loose) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulPreferenceSetAttribute(loose, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &tiny,
                                                   sizeof tiny) == CUBLAS_STATUS_SUCCESS);
      CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, loose, 1, &result, &none) ==
            CUBLAS_STATUS_NOT_SUPPORTED);
      CHECK(none == 0);
      cublasLtMatmulPreferenceDestroy(loose);
      cublasLtMatrixLayout_t short_ld = nullptr;  // ld < rows
      REQUIRE(cublasLtMatrixLayoutCreate(&short_ld, t, N, R, N - 1) == CUBLAS_STATUS_SUCCESS);
      CHECK(cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, out.data(), short_ld, out.data(), short_ld,
                           nullptr, nullptr, ws, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
      cublasLtMatrixLayoutDestroy(short_ld);
      // A pointer less aligned than the preference promised, and a bias off 16 bytes.
      const char* w_off = reinterpret_cast<const char*>(w.data()) + 8;
      CHECK(cublasLtMatmul(lt, op, &alpha, w_off, a, x.data(), b, &beta, out.data(), c, out.data(), c, &result.algo,
                           nullptr, ws, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
      const void* bias_off = reinterpret_cast<const char*>(bias.data()) + 4;
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_off, sizeof bias_off) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, out.data(), c, out.data(), c, nullptr,
                           nullptr, ws, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
      const void* no_bias = nullptr;
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &no_bias, sizeof no_bias) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, out.data(), c, out.data(), c, nullptr,
                           nullptr, ws, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
      // Epilogues the emulator does not compute are refused, never run as something else (the
      // GELU ones and DGELU it does compute: test_emu_cublaslt_gelu.cpp).
      for (cublasLtEpilogue_t other : {CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADB}) {
        CAPTURE(other);
        REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &other, sizeof other) ==
                CUBLAS_STATUS_SUCCESS);
        CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &result, &none) ==
              CUBLAS_STATUS_NOT_SUPPORTED);
        CHECK(cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, out.data(), c, out.data(), c, nullptr,
                             nullptr, ws, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
      }

      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(c);
      cublasLtMatrixLayoutDestroy(b);
      cublasLtMatrixLayoutDestroy(a);
      cublasLtMatmulDescDestroy(op);
    }
    cublasLtDestroy(lt);
  }

  TEST_CASE("emulated cublasGemmEx: k = 0 or alpha = 0 reads neither A nor B, C = beta C") {
    Blas blas;
    Matrix A(CUDA_R_32F, 4, 3, 4), B(CUDA_R_32F, 3, 5, 3), C(CUDA_R_32F, 4, 5, 4);  // A, B all NaN
    C.randomize(14);
    const Matrix C0 = C;
    const float alpha = 0.0f, beta = 2.0f;
    REQUIRE(cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, &alpha, A.data(), CUDA_R_32F, 4, B.data(),
                         CUDA_R_32F, 3, &beta, C.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t i = 0; i < 4; ++i) CHECK(C.get(0, i, j) == 2.0f * C0.get(0, i, j));
    const float one = 1.0f, zero = 0.0f;
    REQUIRE(cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 0, &one, A.data(), CUDA_R_32F, 4, B.data(), CUDA_R_32F,
                         1, &zero, C.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t i = 0; i < 4; ++i) CHECK(C.get(0, i, j) == 0.0f);
  }

  TEST_CASE("emulated cublasGemmEx on a few hundred rows is right") {
    Blas blas;
    Matrix A = operand(CUDA_R_32F, CUBLAS_OP_T, 300, 257, 12), B = operand(CUDA_R_32F, CUBLAS_OP_N, 257, 130, 13);
    Matrix C(CUDA_R_32F, 300, 130, 300);
    REQUIRE(gemm_ex(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS);
    check_gemm(CUBLAS_OP_T, CUBLAS_OP_N, 1.0f, A, B, 0.0f, C, C);
  }

}  // TEST_SUITE("cuda")

#endif  // KEEL_CUDA_EMULATED
