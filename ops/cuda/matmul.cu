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
// The handles (one per device) and the layout helpers are ops/cuda/blas.h's; the cuBLASLt paths
// are ops/cuda/linear_lt.cu.
#include <cublas_v2.h>

#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cuda/kernels.h"
#include "ops/arith.h"
#include "ops/common.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/linear_lt.h"
#include "ops/cuda/matmul.h"
#include "ops/cuda/reduce.h"

namespace keel::cuda {

namespace {
using namespace dev;
using namespace blas;

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
  Handles& h = handles(device);
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
