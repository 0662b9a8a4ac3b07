// CPU kernels of matmul and linear: Eigen GEMM on strided views.
//
// Eigen maps a matrix in place when one of its two strides is 1: unit column stride is a
// row-major matrix, unit row stride a column-major one (that is what a transposed view
// looks like). So the transposes of the backward pass (grad @ b^T, a^T @ grad) cost no copy.
// Eigen's GEMM threads itself through OpenMP; a batch of small products is instead spread
// over the threads one product each (Eigen then stays single-threaded inside the region).
//
// A product with few rows (decoding: one token per sequence through every Linear and the
// output layer) is a matrix-vector product, which Eigen runs on one thread, and Eigen's GEMM
// on 2-8 rows is slower still. Such products split C's columns instead: fixed blocks of
// kColumnBlock columns spread over the threads, each row of a block one Eigen GEMV (see
// few_rows_product). The blocks depend on N alone, so the result does not depend on the
// thread count.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/common.h"
#include "ops/cpu/matmul.h"

namespace keel::cpu {

namespace {

// How a (rows, cols) matrix with strides (rs, cs) maps onto Eigen. A size-1 dimension's
// stride is never used, so it cannot rule a layout out.
struct Layout {
  bool ok = false;
  bool row_major = true;
  int64_t ld = 1;  // Eigen's outer stride
};

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols)) return {true, true, rows <= 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows)) return {true, false, cols <= 1 ? std::max<int64_t>(rows, 1) : cs};
  return {};
}

// t (..., R, C): the layout of its last two dims (the same for every batch element).
Layout layout_of(const Tensor& t) {
  int64_t n = t.dim();
  return layout_of(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
}

// t (..., R, C) as is when Eigen can map its matrices, else a packed copy.
Tensor mappable(const Tensor& t) { return layout_of(t).ok ? t : t.detach().contiguous(); }

// t (..., R, C) -> (..., C, R), a view.
Tensor transpose_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  size_t n = shape.size();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return t.as_strided(shape, strides, t.offset());
}

// Whether t's leading dims (all but the last) merge into one dim of stride row_stride: true
// for a contiguous tensor or one sliced along the last dim, false for most transposes.
bool leading_dims_merge(const Tensor& t, int64_t& row_stride) {
  row_stride = std::max<int64_t>(t.size(-1), 1);
  int64_t inner = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {  // innermost leading dim outwards
    if (t.shape()[d] == 1) continue;
    if (inner < 0)
      row_stride = t.strides()[d];
    else if (t.strides()[d] != t.strides()[inner] * t.shape()[inner])
      return false;
    inner = d;
  }
  return true;
}

// t (..., C) -> (R, C) with R the product of the leading dims: a view when they merge, else
// a packed copy.
Tensor rows2d(const Tensor& t) {
  int64_t C = t.size(-1), R = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) R *= t.shape()[d];
  int64_t row_stride;
  if (leading_dims_merge(t, row_stride)) return t.as_strided({R, C}, {row_stride, t.strides().back()}, t.offset());
  Tensor c = t.detach().contiguous();
  return c.as_strided({R, C}, {C, 1}, c.offset());
}

// At most this many rows take few_rows_product: up to 8 rows, GEMVs on all threads beat
// Eigen's GEMM (measured on the decode shapes: C = 192 -> 3C, 4C, C and 4C -> C, C -> V).
constexpr int64_t kFewRows = 8;
// Columns per block of few_rows_product. A multiple of 8, so every block starts where Eigen's
// row-major GEMV (which takes C's columns, the weight's rows, 8 at a time, then 4, 2, 1) would
// start a group in the unsplit product: a one-row product gets the very bits of one GEMV.
constexpr int64_t kColumnBlock = 32;
// Below this many multiply-adds (M * N * K) a product stays on one thread: starting the
// threads costs more than it saves (C x C at C = 192, 37k, ran slower on two).
constexpr int64_t kMinThreadedWork = int64_t{1} << 16;

// C (M, N) [+]= A (M, K) @ B (K, N) for M <= kFewRows, with A, B and C Eigen maps; K > 0.
// C's columns go in blocks of kColumnBlock (the last takes the remainder, so no block is a
// single column, which Eigen would compute as a dot product instead) over the threads, and
// each row of a block is one Eigen GEMV. So every element is the same dot product whatever
// the thread count, whatever M, and whichever block it falls in: a row's result does not depend
// on the other rows of the batch.
template <typename MatA, typename MatB, typename MatC>
void few_rows_product(const MatA& A, const MatB& B, MatC& C, bool accumulate) {
  const int64_t M = C.rows(), N = C.cols(), K = A.cols();
  const int64_t nblocks = std::max<int64_t>(N / kColumnBlock, 1);
  // Not inside another parallel loop (a batch of products spread over the threads).
  const bool threaded = M * N * K >= kMinThreadedWork && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t j = 0; j < nblocks; ++j) {
    const int64_t n0 = j * kColumnBlock, n = j + 1 == nblocks ? N - n0 : kColumnBlock;
    for (int64_t m = 0; m < M; ++m) {
      auto c = C.row(m).segment(n0, n);
      if (accumulate)
        c.noalias() += A.row(m) * B.middleCols(n0, n);
      else
        c.noalias() = A.row(m) * B.middleCols(n0, n);
    }
  }
}

// C (M, N) [+]= A (M, K) @ B (K, N) on raw pointers; ldc is C's row stride.
template <typename T>
void gemm2d(const T* a, Layout la, const T* b, Layout lb, T* c, int64_t ldc, int64_t M, int64_t K, int64_t N,
            bool accumulate) {
  using Stride = Eigen::OuterStride<>;
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  if (M == 0 || N == 0) return;
  Eigen::Map<RowMat, 0, Stride> C(c, M, N, Stride(ldc));
  if (K == 0) {  // an empty sum
    if (!accumulate) C.setZero();
    return;
  }
  auto with_map = [](const T* p, int64_t rows, int64_t cols, Layout l, auto&& f) {
    if (l.row_major)
      f(Eigen::Map<const RowMat, 0, Stride>(p, rows, cols, Stride(l.ld)));
    else
      f(Eigen::Map<const ColMat, 0, Stride>(p, rows, cols, Stride(l.ld)));
  };
  with_map(a, M, K, la, [&](const auto& A) {
    with_map(b, K, N, lb, [&](const auto& B) {
      if (M <= kFewRows)
        few_rows_product(A, B, C, accumulate);
      else if (accumulate)
        C.noalias() += A * B;
      else
        C.noalias() = A * B;
    });
  });
}

// For each element of the broadcast `batch`, the element offset of t's matrix (relative to
// t.data()); t's missing or size-1 batch dims repeat (stride 0).
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  int64_t nb = static_cast<int64_t>(batch.size()), tb = t.dim() - 2;
  Shape strides(nb, 0);
  for (int64_t d = 0; d < nb; ++d) {
    int64_t td = d - (nb - tb);
    if (td >= 0 && t.shape()[td] != 1) strides[d] = t.strides()[td];
  }
  std::vector<int64_t> offsets(numel_of(batch));
  for_each_offset(batch, strides, 0, [&](int64_t i, int64_t off) { offsets[i] = off; });
  return offsets;
}

// full (batch..., R, C) contiguous -> target (tbatch..., R, C), tbatch broadcasting to batch:
// the sum over the batch elements that shared one target matrix.
Tensor sum_to(const Tensor& full, const Shape& target) {
  if (full.shape() == target) return full;
  Tensor out = zeros(target, {full.dtype()});
  int64_t n = full.dim(), tn = static_cast<int64_t>(target.size());
  Shape tstrides = contiguous_strides(target), strides(n, 0);
  for (int64_t d = 0; d < n; ++d) {
    int64_t td = d - (n - tn);
    if (td >= 0 && target[td] != 1) strides[d] = tstrides[td];
  }
  visit_dtype<CpuFloat>(full.dtype(), "matmul", [&]<typename T>() {
    const T* f = full.data<T>();
    T* o = out.data<T>();
    for_each_offset(full.shape(), strides, 0, [&](int64_t i, int64_t off) { o[off] += f[i]; });
  });
  return out;
}

// c (M, N) with unit column stride; a (M, K), b (K, N) any strides: c = a @ b, or c += a @ b
// when accumulate.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool accumulate = false) {
  Tensor pa = mappable(a), pb = mappable(b);
  int64_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[1];
  int64_t ldc = M <= 1 ? std::max<int64_t>(N, 1) : c.strides()[0];
  visit_dtype<CpuFloat>(a.dtype(), "matmul", [&]<typename T>() {
    gemm2d<T>(pa.data<T>(), layout_of(pa), pb.data<T>(), layout_of(pb), c.data<T>(), ldc, M, K, N, accumulate);
  });
}

}  // namespace

// a (..., M, K), b (..., K, N) -> (..., M, N)
Tensor matmul(const Tensor& a0, const Tensor& b0) {
  Tensor a = mappable(a0), b = mappable(b0);
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape batch = matmul_batch_shape(a, b, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = empty(out_shape, {a.dtype()});

  // A matrix shared by the whole batch: one tall GEMM (batch*M, K) @ (K, N) threads best.
  int64_t row_stride;
  if (b.dim() == 2 && leading_dims_merge(a, row_stride)) {
    Tensor a2 = rows2d(a);
    Tensor o2 = out.as_strided({a2.size(0), N}, {N, 1}, 0);
    gemm(a2, b, o2);
    return out;
  }

  int64_t nbatch = numel_of(batch);
  std::vector<int64_t> oa = batch_offsets(a, batch), ob = batch_offsets(b, batch);
  Layout la = layout_of(a), lb = layout_of(b);
  // Spread the batch over the threads when there are enough products to go round, or when
  // each is too small for Eigen's own threading to pay.
  bool by_batch = nbatch > 1 && (nbatch >= omp_get_max_threads() || M * N * K <= (int64_t{1} << 18));
  visit_dtype<CpuFloat>(a.dtype(), "matmul", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static) if (by_batch)
    for (int64_t i = 0; i < nbatch; ++i) gemm2d<T>(pa + oa[i], la, pb + ob[i], lb, po + i * M * N, N, M, K, N, false);
  });
  return out;
}

// grad (..., M, N), b (..., K, N) -> (a_shape) = sum over broadcast of grad @ b^T
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape) {
  return sum_to(cpu::matmul(grad, transpose_last(b)), a_shape);
}

// grad (..., M, N), a (..., M, K) -> (b_shape) = sum over broadcast of a^T @ grad
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape) {
  if (b_shape.size() == 2) {
    // b was one (K, N) matrix for the whole batch (whose shape is then a's): one GEMM
    // (K, batch*M) @ (batch*M, N) instead of a product per batch element and a sum.
    Tensor a2 = rows2d(a), g2 = rows2d(grad);
    Tensor db = empty(b_shape, {grad.dtype()});
    gemm(transpose_last(a2), g2, db);
    return db;
  }
  return sum_to(cpu::matmul(transpose_last(a), grad), b_shape);
}

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  visit_dtype<CpuFloat>(x.dtype(), "linear", []<typename T>() {});  // refuse half types as linear, not matmul
  int64_t N = weight.size(0);
  Tensor x2 = rows2d(x);
  int64_t R = x2.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = empty(out_shape, {x.dtype()});
  Tensor o2 = out.as_strided({R, N}, {N, 1}, 0);
  if (bias.defined()) {  // start every row from the bias, then accumulate the product into it
    Tensor pb = bias.detach().contiguous();
    visit_dtype<CpuFloat>(x.dtype(), "linear", [&]<typename T>() {
      const T* b = pb.data<T>();
      T* o = out.data<T>();
      for (int64_t r = 0; r < R; ++r) std::copy(b, b + N, o + r * N);
    });
  }
  gemm(x2, transpose_last(weight), o2, bias.defined());
  return out;
}

// grad (..., N), weight (N, K) -> (..., K)
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight) {
  int64_t K = weight.size(1);
  Tensor g2 = rows2d(grad);
  Shape shape = grad.shape();
  shape.back() = K;
  Tensor dx = empty(shape, {grad.dtype()});
  Tensor dx2 = dx.as_strided({g2.size(0), K}, {K, 1}, 0);
  gemm(g2, weight, dx2);
  return dx;
}

// grad (..., N), x (..., K) -> (N, K)
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x) {
  Tensor g2 = rows2d(grad), x2 = rows2d(x);
  Tensor dw = empty({g2.size(1), x2.size(1)}, {grad.dtype()});
  gemm(transpose_last(g2), x2, dw);
  return dw;
}

// grad (..., N) -> (N)
Tensor linear_grad_bias(const Tensor& grad) {
  Tensor g2 = rows2d(grad).contiguous();
  int64_t R = g2.size(0), N = g2.size(1);
  Tensor db = empty({N}, {grad.dtype()});
  visit_dtype<CpuFloat>(grad.dtype(), "linear", [&]<typename T>() {
    // Summed in double: a bias gradient adds up batch*sequence rows.
    std::vector<double> acc(N, 0.0);
    const T* g = g2.data<T>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t n = 0; n < N; ++n) acc[n] += g[r * N + n];
    T* d = db.data<T>();
    for (int64_t n = 0; n < N; ++n) d[n] = static_cast<T>(acc[n]);
  });
  return db;
}

}  // namespace keel::cpu
