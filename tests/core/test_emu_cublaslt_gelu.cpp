// The emulated cuBLASLt's GELU epilogues (core/cuda/emu/cublaslt.cpp), called as keel's linear_gelu
// calls them (ops/cuda/matmul.cu: linear_lt): D = gelu(op(A) op(B) + bias) in the tanh form, and
// with GELU_AUX(_BIAS) the value before the GELU in the aux matrix, at its own leading dimension;
// with DGELU (mlp's backward) D = op(A) op(B) * gelu'(aux), aux read; plus the refusals cublasLt.h
// documents for the aux matrix. Checked against f64 on the values
// actually stored; unwritten elements hold NaN. Only the emulated build has these stand-ins.
#ifdef KEEL_CUDA_EMULATED
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "emu_typed_elements.h"

namespace {

// n elements of one CUDA type in host memory (device memory on the emulated GPU), NaN to start.
struct Buf {
  cudaDataType_t type;
  std::vector<float> storage;  // float-aligned; half types use half of it
  Buf(cudaDataType_t t, int64_t n) : type(t), storage(static_cast<size_t>(n + 8), 0.0f) {
    for (int64_t i = 0; i < n; ++i) put(i, NAN);
  }
  void* data() { return storage.data(); }
  float at(int64_t i) const { return keel::testing::typed_at(type, storage.data(), i); }
  void put(int64_t i, float v) { keel::testing::typed_put(type, storage.data(), i, v); }
  Buf& randomize(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    for (int64_t i = 0; i < n; ++i) put(i, u(gen));
    return *this;
  }
};

double gelu(double v) {
  return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
}
double gelu_grad(double v) {
  const double b = std::sqrt(2.0 / std::numbers::pi), t = std::tanh(b * (v + 0.044715 * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * b * (1.0 + 3.0 * 0.044715 * v * v);
}
double output_eps(cudaDataType_t t) { return t == CUDA_R_16F ? 0x1p-11 : t == CUDA_R_16BF ? 0x1p-8 : 0.0; }

// out^T (m = N, n = R) = op_T(w as K x N) (x^T as K x R) [+ bias (N)], column-major as linear_lt
// sees the row-major x (R, K), w (N, K), out (R, N).
struct Problem {
  cudaDataType_t t;
  int64_t m, n, k;
  Buf w, x, bias, d;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Problem(cudaDataType_t t_, int64_t m_, int64_t n_, int64_t k_)
      : t(t_), m(m_), n(n_), k(k_), w(t_, k_ * m_), x(t_, k_ * n_), bias(t_, m_), d(t_, m_ * n_) {
    w.randomize(k * m, 1, 0.5f), x.randomize(k * n, 2), bias.randomize(m, 3);
    REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&a, t, k, m, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, t, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&c, t, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~Problem() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
  }
  template <class T>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t attr, const T& v) {
    return cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof v);
  }
  cublasStatus_t heuristic() {
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    return cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &r, &found);
  }
  cublasStatus_t matmul() {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(lt, op, &alpha, w.data(), a, x.data(), b, &beta, d.data(), c, d.data(), c, nullptr, nullptr,
                          0, nullptr);
  }
  // The f64 product plus bias of element (i, j), and the sum of its terms' sizes.
  std::pair<double, double> value(int64_t i, int64_t j, bool with_bias) const {
    double v = 0, bound = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double term = double(w.at(p + i * k)) * double(x.at(p + j * k));
      v += term, bound += std::fabs(term);
    }
    if (with_bias) v += bias.at(i), bound += std::fabs(bias.at(i));
    return {v, bound};
  }
};

// Every element of D against gelu(value), and of aux (when given, at leading dimension aux_ld)
// against value; aux's padding rows must stay NaN. Bounds: f32 accumulation over k terms, the
// GELU's slope (under 1.13) times that, f32 tanh's rounding, and the output's own rounding.
void check(const Problem& p, bool with_bias, const Buf* aux, int64_t aux_ld) {
  double worst = 0;
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      const auto [v, bound] = p.value(i, j, with_bias);
      const double acc = double(p.k + 4) * 0x1p-24 * bound;
      const double g = gelu(v), got = p.d.at(i + j * p.m);
      const double tol_d = 1.2 * acc + 8 * 0x1p-24 * (std::fabs(v) + 1) + output_eps(p.t) * std::fabs(g) + 1e-30;
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - g) / tol_d : INFINITY);
      if (!aux) continue;
      const double pre = aux->at(i + j * aux_ld), tol_a = acc + output_eps(p.t) * std::fabs(v) + 1e-30;
      worst = std::max(worst, std::isfinite(pre) ? std::fabs(pre - v) / tol_a : INFINITY);
      if (i == 0)
        for (int64_t pad = p.m; pad < aux_ld; ++pad) CHECK(std::isnan(aux->at(pad + j * aux_ld)));
    }
  INFO("worst error / tolerance " << worst);
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("emulated cublasLtMatmul with GELU_AUX_BIAS: D the tanh GELU, aux the value before it") {
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
      CAPTURE(t);
      Problem p(t, 16, 11, 19);  // N 16 (the aux rows), R 11, K 19
      const int64_t aux_ld = 24;  // a multiple of 8 past the 16 rows: padding that must stay NaN
      Buf aux(t, aux_ld * p.n);
      void* aux_ptr = aux.data();
      const void* bias_ptr = p.bias.data();
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_ptr) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.matmul() == CUBLAS_STATUS_SUCCESS);
      check(p, true, &aux, aux_ld);

      // The aux matrix's leading dimension: a multiple of 8, at least the rows of D (cublasLt.h).
      CHECK(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(20)) == CUBLAS_STATUS_SUCCESS);
      CHECK(p.heuristic() == CUBLAS_STATUS_INVALID_VALUE);
      CHECK(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8)) == CUBLAS_STATUS_SUCCESS);
      CHECK(p.matmul() == CUBLAS_STATUS_INVALID_VALUE);
      CHECK(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int32_t(16)) == CUBLAS_STATUS_INVALID_VALUE);  // an int64_t
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld) == CUBLAS_STATUS_SUCCESS);
      // An aux type other than D's is not emulated; said so, not computed as D's.
      const int32_t other = t == CUDA_R_32F ? CUDA_R_16F : CUDA_R_32F;
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, other) == CUBLAS_STATUS_SUCCESS);
      CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t(-1)) == CUBLAS_STATUS_SUCCESS);
      // No aux pointer: nowhere to write the pre-activation. Off its element: no algorithm. Off
      // 16 bytes: the kernel would fault.
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(nullptr)) == CUBLAS_STATUS_SUCCESS);
      CHECK(p.matmul() == CUBLAS_STATUS_INVALID_VALUE);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(static_cast<char*>(aux_ptr) + 1)) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(static_cast<char*>(aux_ptr) + 4)) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(p.matmul() == CUBLAS_STATUS_EXECUTION_FAILED);
    }
  }

  TEST_CASE("emulated cublasLtMatmul with GELU, GELU_BIAS and GELU_AUX") {
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF}) {
      CAPTURE(t);
      {
        Problem p(t, 13, 7, 33);  // no aux: any number of rows
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.matmul() == CUBLAS_STATUS_SUCCESS);
        check(p, false, nullptr, 0);
      }
      {
        Problem p(t, 13, 7, 33);
        const void* bias_ptr = p.bias.data();
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_BIAS) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.matmul() == CUBLAS_STATUS_SUCCESS);
        check(p, true, nullptr, 0);
      }
      {
        Problem p(t, 8, 5, 12);
        Buf aux(t, 8 * p.n);
        void* aux_ptr = aux.data();
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_ptr) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8)) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(p.matmul() == CUBLAS_STATUS_SUCCESS);
        check(p, false, &aux, 8);
      }
    }
  }

  TEST_CASE("emulated cublasLtMatmul with DGELU: D the product times the GELU's derivative at aux") {
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
      CAPTURE(t);
      Problem p(t, 16, 11, 19);
      const int64_t aux_ld = 24;  // padding rows stay NaN: they must not be read
      Buf aux(t, aux_ld * p.n);
      for (int64_t j = 0; j < p.n; ++j)
        for (int64_t i = 0; i < p.m; ++i) aux.put(i + j * aux_ld, 3.0f * std::sin(float(7 * i + 3 * j)));
      const std::vector<float> before = aux.storage;
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux.data())) ==
              CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
      REQUIRE(p.matmul() == CUBLAS_STATUS_SUCCESS);
      double worst = 0;
      for (int64_t j = 0; j < p.n; ++j)
        for (int64_t i = 0; i < p.m; ++i) {
          const auto [v, bound] = p.value(i, j, false);
          const double g = gelu_grad(aux.at(i + j * aux_ld)), want = v * g, got = p.d.at(i + j * p.m);
          // f32 accumulation, f32 tanh's rounding in the derivative (|g| < 1.2), the output's rounding
          const double tol = (double(p.k + 4) * 0x1p-24 * bound) * 1.2 + 8 * 0x1p-24 * std::fabs(v) +
                             output_eps(p.t) * std::fabs(want) + 1e-30;
          worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / tol : INFINITY);
        }
      INFO("worst error / tolerance " << worst);
      CHECK(worst <= 1.0);
      CHECK(std::equal(before.begin(), before.end(), aux.storage.begin(), [](float a, float b) {
        return (std::isnan(a) && std::isnan(b)) || a == b;
      }));  // an input: left as it was
      // No aux pointer: nothing to take the derivative at. DGELU_BGRAD (a bias gradient too) is
      // not emulated: said so.
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(nullptr)) ==
              CUBLAS_STATUS_SUCCESS);
      CHECK(p.matmul() == CUBLAS_STATUS_INVALID_VALUE);
      REQUIRE(p.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU_BGRAD) == CUBLAS_STATUS_SUCCESS);
      CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    }
  }
}  // TEST_SUITE("cuda")

#endif  // KEEL_CUDA_EMULATED
