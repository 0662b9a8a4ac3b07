// matmul and linear on the device through cuBLAS (and cuBLASLt for linear's fused bias and
// linear_gelu's fused bias + GELU, ops/cuda/linear_lt.h).
//
// Precision: CUBLAS_COMPUTE_32F everywhere. For f32 that means true f32 FMA (TF32 stays off:
// keel's f32 is a reference precision); for bf16/f16 operands it means tensor cores with f32
// accumulation, rounding only the output.
//
// Row-major via the transpose trick: cuBLAS is column-major, and a row-major (M, N) matrix is
// the column-major (N, M) matrix of its transpose, so C = A B is computed as C^T = B^T A^T
// with the operands swapped. An operand whose rows or columns are unit-stride (a plain tensor
// or a transposed view) goes in as it is with op N or T; anything else is packed first. A
// batch whose matrices sit at one stride (plan::single_batch_stride: plain batches, and a
// matrix shared by the whole batch with stride 0) is one strided-batched call; other
// broadcasts are materialised. When b is one matrix and a's leading dims merge, the batch
// folds into the rows: one tall GEMM, which cuBLAS runs faster than a batch of short ones.
//
// Handles: one cuBLAS and one cuBLASLt handle per device, made on first use, bound to keel's
// stream of that device, sharing one 32 MiB workspace from keel's caching allocator (kept for
// the life of the process). keel issues its work from one host thread per device.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <climits>
#include <memory>
#include <mutex>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cuda/kernels.h"
#include "ops/arith.h"
#include "ops/common.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear_lt.h"
#include "ops/cuda/matmul.h"
#include "ops/cuda/reduce.h"

namespace keel::cuda {

namespace {
using namespace dev;

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct Blas {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
};

Blas& blas(int device) {
  static std::mutex mu;
  static std::unique_ptr<Blas> per_device[64];
  if (device < 0 || device >= 64) throw DeviceError("matmul", "device index " + std::to_string(device) + " too large");
  std::lock_guard<std::mutex> lock(mu);
  if (!per_device[device]) {
    auto b = std::make_unique<Blas>();
    KEEL_CHECK_CUDA(cudaSetDevice(device));
    KEEL_CHECK_CUBLAS(cublasCreate(&b->handle));
    KEEL_CHECK_CUBLAS(cublasSetStream(b->handle, detail::stream(device)));
    b->workspace = keel::allocate(Device::cuda(device), kWorkspaceBytes);
    KEEL_CHECK_CUBLAS(cublasSetWorkspace(b->handle, b->workspace, kWorkspaceBytes));
    KEEL_CHECK_CUBLAS(cublasSetMathMode(b->handle, CUBLAS_DEFAULT_MATH));  // no TF32 for f32
    KEEL_CHECK_CUBLAS(cublasLtCreate(&b->lt));
    per_device[device] = std::move(b);
  }
  return *per_device[device];
}

cudaDataType_t cuda_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default:
      throw DTypeError(op, std::string("CUDA matmul computes in f32, bf16 or f16, got ") + dtype_name(t),
                       "f64 is for gradient checks on the CPU; convert with .to(DType::f32)");
  }
}

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw ShapeError("matmul", std::string(what) + " = " + std::to_string(v) + " exceeds what one cuBLAS call takes");
  return static_cast<int>(v);
}

// How a (rows, cols) matrix with strides (rs, cs) maps onto BLAS (as in ops/cpu/matmul.cpp):
// row-major with leading dim ld >= cols, or column-major with ld >= rows.
struct Layout {
  bool ok = false;
  bool row_major = true;
  int64_t ld = 1;
};
Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols)) return {true, true, rows <= 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows)) return {true, false, cols <= 1 ? std::max<int64_t>(rows, 1) : cs};
  return {};
}
Layout layout_of(const Tensor& t) {
  const int64_t n = t.dim();
  return layout_of(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
}
Tensor mappable(const Tensor& t) { return layout_of(t).ok ? t : t.detach().contiguous(); }

// t (..., R, C) -> (..., C, R), a view.
Tensor transpose_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const size_t n = shape.size();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return t.as_strided(shape, strides, t.offset());
}

// t (..., C) -> (R, C): a view when the leading dims merge into one of a single stride, else
// a packed copy (ops/cpu/matmul.cpp's rows2d).
Tensor rows2d(const Tensor& t) {
  const int64_t C = t.size(-1);
  int64_t R = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) R *= t.shape()[d];
  std::vector<int64_t> lead(t.shape().begin(), t.shape().end() - 1), lead_strides(t.strides().begin(), t.strides().end() - 1);
  std::optional<int64_t> rs = plan::single_batch_stride(lead, lead_strides);
  if (rs && (R <= 1 || *rs != 0)) return t.as_strided({R, C}, {R <= 1 ? std::max<int64_t>(C, 1) : *rs, t.strides().back()}, t.offset());
  Tensor c = t.detach().contiguous();
  return c.as_strided({R, C}, {C, 1}, c.offset());
}

// One operand as cuBLAS sees it: base pointer, layout of its (rows, cols) matrices, and the
// element stride between consecutive matrices of the batch.
struct Operand {
  const void* p;
  Layout l;
  int64_t batch_stride;
};

// C (M, N) row-major with leading dim ldc, nb matrices at stride sc: C = alpha A B + beta C.
void gemm(DType dt, int device, int64_t M, int64_t N, int64_t K, const Operand& A, const Operand& B, void* C,
          int64_t ldc, int64_t sc, int64_t nb, float beta) {
  if (M == 0 || N == 0 || nb == 0) return;
  if (K == 0) {  // an empty sum: C = beta C (callers with beta = 0 fill zeros themselves)
    if (beta == 0.0f) throw ValueError("matmul", "internal: K = 0 with beta = 0 reached gemm");
    return;
  }
  const cudaDataType_t t = cuda_type(dt, "matmul");
  Blas& h = blas(device);
  const float alpha = 1.0f;
  // C^T (N x M) = B^T (N x K) A^T (K x M): a row-major operand is its transpose, op N.
  const cublasOperation_t opa = B.l.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t opb = A.l.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int m = as_int(N, "N"), n = as_int(M, "M"), k = as_int(K, "K");
  const int lda = as_int(B.l.ld, "ld"), ldb = as_int(A.l.ld, "ld"), ldcc = as_int(ldc, "ld");
  if (nb == 1) {
    detail::count_library_call();
    KEEL_CHECK_CUBLAS(cublasGemmEx(h.handle, opa, opb, m, n, k, &alpha, B.p, t, lda, A.p, t, ldb, &beta, C, t, ldcc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    detail::count_library_call();
    KEEL_CHECK_CUBLAS(cublasGemmStridedBatchedEx(h.handle, opa, opb, m, n, k, &alpha, B.p, t, lda, B.batch_stride, A.p,
                                                 t, ldb, A.batch_stride, &beta, C, t, ldcc, sc, as_int(nb, "batch"),
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

const void* base_of(const Tensor& t) { return t.raw_data(); }

// The largest power of two, up to 256, dividing p's address: what cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// A 2-D operand (rows, cols) with any strides, packed when BLAS cannot take it.
Operand operand2d(const Tensor& t, Tensor& keep) {
  keep = mappable(t);
  return {base_of(keep), layout_of(keep), 0};
}

// a (M, K), b (K, N) -> c (M, N) contiguous, c = a b + beta c
void gemm2d(const Tensor& a, const Tensor& b, Tensor& c, float beta = 0.0f) {
  Tensor ka, kb;
  Operand A = operand2d(a, ka), B = operand2d(b, kb);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (K == 0 && beta == 0.0f) return fill(c, 0.0);
  gemm(a.dtype(), c.device().index, M, N, K, A, B, c.raw_data(), std::max<int64_t>(N, 1), 0, 1, beta);
}

// Makes a operand of the batch: t (tb..., R, C) broadcast to (batch..., R, C).
Operand batched_operand(const Tensor& t0, const Shape& batch, Tensor& keep) {
  keep = mappable(t0);
  const int64_t nb = static_cast<int64_t>(batch.size()), tb = keep.dim() - 2;
  std::vector<int64_t> eff(nb, 0);
  for (int64_t d = 0; d < nb; ++d) {
    const int64_t td = d - (nb - tb);
    if (td >= 0 && keep.shape()[td] != 1) eff[d] = keep.strides()[td];
  }
  if (std::optional<int64_t> s = plan::single_batch_stride(batch, eff)) return {base_of(keep), layout_of(keep), *s};
  // No single stride (a broadcast over some batch dims only): materialise the whole batch.
  Shape shape = batch, strides = eff;
  shape.push_back(keep.size(-2)), shape.push_back(keep.size(-1));
  strides.push_back(keep.strides()[keep.dim() - 2]), strides.push_back(keep.strides()[keep.dim() - 1]);
  keep = keep.detach().as_strided(shape, strides, keep.offset()).contiguous();
  return {base_of(keep), layout_of(keep), keep.size(-2) * keep.size(-1)};
}

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
  Blas& h = blas(device);
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

// x (R, K) row-major, weight (N, K) row-major, bias (N) or undefined -> out (R, N) contiguous =
// x weight^T + bias in one cublasLtMatmul with the BIAS epilogue; with gelu, out = gelu(that)
// (GELU_BIAS or GELU), and with aux (R, N) contiguous also aux = that (GELU_AUX_BIAS or GELU_AUX).
// False, with nothing written, when cuBLASLt offers no algorithm for these operands.
bool linear_lt(const Tensor& x2, const Tensor& w, const Tensor& bias, Tensor& out, bool gelu = false,
               Tensor* aux = nullptr) {
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
}  // namespace

// a (..., M, K), b (..., K, N) -> (batch..., M, N)
Tensor matmul(const Tensor& a, const Tensor& b) {
  require_device(a, "matmul");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape batch = matmul_batch_shape(a, b, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M), out_shape.push_back(N);
  Tensor out = empty(out_shape, {a.dtype(), a.device()});
  cuda_type(a.dtype(), "matmul");  // DTypeError before any work
  if (out.numel() == 0) return out;
  if (K == 0) {
    fill(out, 0.0);
    return out;
  }
  KEEL_CHECK_CUDA(cudaSetDevice(a.device().index));
  // One matrix b for the whole batch and a's rows mergeable: a single (batch*M, K) @ (K, N).
  if (b.dim() == 2) {
    Tensor a2 = rows2d(a);
    Tensor o2 = out.as_strided({a2.size(0), N}, {N, 1}, 0);
    gemm2d(a2, b, o2);
    return out;
  }
  Tensor ka, kb;
  const Operand A = batched_operand(a, batch, ka), B = batched_operand(b, batch, kb);
  gemm(a.dtype(), a.device().index, M, N, K, A, B, out.raw_data(), N, M * N, numel_of(batch), 0.0f);
  return out;
}

// grad (..., M, N), b (..., K, N) -> (a_shape): grad @ b^T summed over a's broadcast
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape) {
  NoGradGuard no_grad;
  return sum_to_shape(cuda::matmul(grad, transpose_last(b)), a_shape);
}

// grad (..., M, N), a (..., M, K) -> (b_shape): a^T @ grad summed over b's broadcast
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape) {
  require_device(grad, "matmul backward");
  NoGradGuard no_grad;
  if (b_shape.size() == 2) {
    // b was one (K, N) matrix for the whole batch: one GEMM (K, batch*M) @ (batch*M, N).
    Tensor a2 = rows2d(a), g2 = rows2d(grad);
    Tensor db = empty(b_shape, {grad.dtype(), grad.device()});
    gemm2d(transpose_last(a2), g2, db);
    return db;
  }
  return sum_to_shape(cuda::matmul(transpose_last(a), grad), b_shape);
}

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  require_device(x, "linear");
  cuda_type(x.dtype(), "linear");
  const int64_t N = weight.size(0);
  Tensor x2 = rows2d(x);
  const int64_t R = x2.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = empty(out_shape, {x.dtype(), x.device()});
  if (out.numel() == 0) return out;
  KEEL_CHECK_CUDA(cudaSetDevice(x.device().index));
  Tensor o2 = out.as_strided({R, N}, {N, 1}, 0);
  if (bias.defined() && x2.size(1) > 0) {
    Tensor xm = mappable(x2), wm = weight.is_contiguous() ? weight : weight.detach().contiguous();
    if (linear_lt(xm, wm, bias, o2)) return out;
  }
  if (bias.defined()) {
    // Fallback: start every row from the bias, then accumulate the product (beta = 1).
    Tensor rows = bias.detach().as_strided({R, N}, {0, bias.strides()[0]}, bias.offset());
    copy_strided(o2, rows);
    Tensor ka, kb;
    const Operand A = operand2d(x2, ka), B = operand2d(transpose_last(weight), kb);
    gemm(x.dtype(), x.device().index, R, N, x2.size(1), A, B, o2.raw_data(), N, 0, 1, 1.0f);
    return out;
  }
  gemm2d(x2, transpose_last(weight), o2);
  return out;
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

// grad (..., N), weight (N, K) -> (..., K)
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight) {
  require_device(grad, "linear backward");
  const int64_t K = weight.size(1);
  Tensor g2 = rows2d(grad);
  Shape shape = grad.shape();
  shape.back() = K;
  Tensor dx = empty(shape, {grad.dtype(), grad.device()});
  Tensor dx2 = dx.as_strided({g2.size(0), K}, {K, 1}, 0);
  gemm2d(g2, weight, dx2);
  return dx;
}

// grad (..., N), x (..., K) -> (N, K)
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x) {
  require_device(grad, "linear backward");
  Tensor g2 = rows2d(grad), x2 = rows2d(x);
  Tensor dw = empty({g2.size(1), x2.size(1)}, {grad.dtype(), grad.device()});
  gemm2d(transpose_last(g2), x2, dw);
  return dw;
}

// grad (..., N) -> (N), summed over all rows in f32
Tensor linear_grad_bias(const Tensor& grad) {
  require_device(grad, "linear backward");
  Tensor g2 = rows2d(grad).contiguous();
  const int64_t R = g2.size(0), N = g2.size(1);
  Tensor db = empty({N}, {grad.dtype(), grad.device()});
  cuda::reduce_dim(Reduce::sum, g2, 1, R, N, db);
  return db;
}

}  // namespace keel::cuda
