// linear's cuBLASLt paths (ops/cuda/linear_lt.h): the product with its bias, its GELU, or the
// GELU's derivative as the epilogue, one cublasLtMatmul each, on the handles and layouts of
// ops/cuda/blas.h. Row-major by the transpose trick, as ops/cuda/matmul.cu explains.
#include <cublasLt.h>

#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/error.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/linear_lt.h"

namespace keel::cuda {

using namespace blas;

namespace {

// The descriptors of one cublasLtMatmul, destroyed on every path out, errors included.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs(cublasOperation_t ta, cublasOperation_t tb, cublasLtEpilogue_t epi) {
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  // The epilogue's aux matrix: column-major with leading dimension ld, in D's type (the default).
  void set_aux(const void* aux, int64_t ld) {
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    KEEL_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
};

// D = A B (alpha 1, beta 0; C is D) on the layouts and epilogue of d, with the algorithm
// cuBLASLt's heuristic picks for these pointers' alignments. False, with nothing queued, when it
// offers none.
bool lt_run(LtDescs& d, int device, const void* A, const void* B, void* D) {
  Handles& h = handles(device);
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = kWorkspaceBytes;
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // The heuristic assumes 256-byte aligned buffers unless told otherwise; views are not.
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(D);
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  KEEL_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h.lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return false;  // e.g. operands off the 16-byte alignment the epilogue kernels want
  const float alpha = 1.0f, beta = 0.0f;
  detail::count_library_call();
  KEEL_CHECK_CUBLAS(cublasLtMatmul(h.lt, d.op, &alpha, A, d.a, B, d.b, &beta, D, d.c, D, d.c, &result.algo,
                                   h.workspace, kWorkspaceBytes, detail::stream(device)));
  return true;
}

}  // namespace

bool linear_lt(const Tensor& x2, const Tensor& w, const Tensor& bias, Tensor& out, bool gelu, Tensor* aux) {
  const Layout lx = layout_of(x2), lw = layout_of(w);
  if (!lx.row_major || !lw.row_major) return false;
  // The bias epilogue reads the bias with vector loads: keep it 16-byte aligned. The aux matrix's
  // leading dimension (N here) must be a multiple of 8 (cublasLt.h, EPILOGUE_AUX_LD).
  if (bias.defined() && (!bias.is_contiguous() || alignment_of(bias.raw_data()) < 16)) return false;
  if (aux && (w.size(0) % 8 != 0 || alignment_of(aux->raw_data()) < 16)) return false;
  const int64_t R = x2.size(0), K = x2.size(1), N = w.size(0);
  const cudaDataType_t t = cuda_type(x2.dtype(), "linear");
  // Column-major view: out^T (N x R) = weight (as K x N col-major, op T) * x^T (K x R col-major).
  const bool has_bias = bias.defined();
  const cublasLtEpilogue_t epi = !gelu ? (has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT)
                                 : aux ? (has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                       : (has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
  LtDescs d(CUBLAS_OP_T, CUBLAS_OP_N, epi);
  if (has_bias) {
    const void* bias_ptr = bias.raw_data();
    KEEL_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
    const int32_t bias_type = t;  // the attribute is an int32_t holding a cudaDataType
    KEEL_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  if (aux) d.set_aux(aux->raw_data(), N);  // the pre-activation, column-major (N x R) = row-major (R, N)
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.a, t, as_int(K, "K"), as_int(N, "N"), as_int(lw.ld, "ld")));
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.b, t, as_int(K, "K"), as_int(R, "rows"), as_int(lx.ld, "ld")));
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.c, t, as_int(N, "N"), as_int(R, "rows"), as_int(N, "ld")));
  return lt_run(d, out.device().index, w.raw_data(), x2.raw_data(), out.raw_data());
}

// x (..., K), weight (N, K), bias (N) or undefined, out and pre (..., N) contiguous -> written?
bool linear_gelu_lt(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor* pre) {
  Tensor x2 = rows2d(x);
  const int64_t R = x2.size(0), N = weight.size(0);
  if (R == 0 || N == 0 || x2.size(1) == 0) return false;  // no product for an epilogue to ride on
  KEEL_CHECK_CUDA(cudaSetDevice(x.device().index));
  Tensor o2 = out.as_strided({R, N}, {N, 1}, out.offset());
  Tensor p2 = pre ? pre->as_strided({R, N}, {N, 1}, pre->offset()) : Tensor();
  Tensor xm = mappable(x2), wm = weight.is_contiguous() ? weight : weight.detach().contiguous();
  return linear_lt(xm, wm, bias, o2, true, pre ? &p2 : nullptr);
}

// grad (..., N), weight (N, K), pre (..., K) contiguous, dpre (..., K) contiguous -> written?
bool linear_grad_x_dgelu_lt(const Tensor& grad, const Tensor& weight, const Tensor& pre, Tensor& dpre) {
  Tensor g2 = rows2d(grad);
  const int64_t R = g2.size(0), N = g2.size(1), K = weight.size(1);
  // The aux matrix's leading dimension (K here) must be a multiple of 8 (cublasLt.h, EPILOGUE_AUX_LD).
  if (R == 0 || N == 0 || K == 0 || K % 8 != 0 || alignment_of(pre.raw_data()) < 16) return false;
  KEEL_CHECK_CUDA(cudaSetDevice(grad.device().index));
  Tensor gm = mappable(g2), wm = weight.is_contiguous() ? weight : weight.detach().contiguous();
  const Layout lg = layout_of(gm);
  if (!lg.row_major) return false;
  const cudaDataType_t t = cuda_type(grad.dtype(), "linear backward");
  // Column-major view: dpre^T (K x R) = weight (as K x N col-major, op N) * grad^T (N x R
  // col-major), then times gelu'(pre^T) (K x R col-major) element by element.
  LtDescs d(CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU);
  d.set_aux(pre.raw_data(), K);
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.a, t, as_int(K, "K"), as_int(N, "N"), as_int(K, "ld")));
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.b, t, as_int(N, "N"), as_int(R, "rows"), as_int(lg.ld, "ld")));
  KEEL_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.c, t, as_int(K, "K"), as_int(R, "rows"), as_int(K, "ld")));
  return lt_run(d, grad.device().index, wm.raw_data(), gm.raw_data(), dpre.raw_data());
}

}  // namespace keel::cuda
