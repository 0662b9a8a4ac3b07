// CPU kernels of matmul and linear: Eigen GEMM on strided views, spread over keel's threads.
//
// Eigen maps a matrix in place when one of its strides is 1 (unit column stride: row-major; unit
// row stride: column-major, as a transposed view is), so the backward's transposes cost no copy.
//
// Eigen runs single-threaded here (EIGEN_DONT_PARALLELIZE, ops/CMakeLists.txt); keel splits a
// product itself (core/parallel.h). A product of many rows cuts C's rows into blocks, each one
// serial Eigen GEMM of A's rows against all of B. Blocks start at multiples of kRowGranule rows,
// and Eigen's GEMM computes a row the same way wherever it sits in such a block (its K blocking
// depends on K alone; its kernels take rows in packets of 8 floats on AVX2, 16 on AVX-512), so
// every element is the bits of the unsplit serial product, on any thread count
// (tests/ops/test_matmul.cpp holds it). Splitting the columns instead would change the bits
// (Eigen's last columns take other kernels) and repack A for every block, so it is not done.
// A layer's bias and activation ride on the row blocks (linear_into): the bias is written
// into a block just before its product accumulates on it, the GELU applied to it just after,
// while the block is still in the core's cache.
//
// A product with few rows (decoding: one token per sequence) is a matrix-vector product, which
// Eigen runs on one thread (its GEMM on 2-8 rows is slower still). Such products split C's
// columns instead, in fixed blocks of kColumnBlock columns, each row of a block one Eigen GEMV
// (few_rows_product): the blocks depend on N alone, not on the thread count.
#include <Eigen/Core>
#include <algorithm>
#include <functional>

#include "core/copy.h"
#include "core/factory.h"
#include "core/parallel.h"
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

// At most this many rows take few_rows_product: up to 8 rows, GEMVs on all threads beat Eigen's
// GEMM (measured on the decode shapes C = 192 -> 3C, 4C, C, 4C -> C, C -> V).
constexpr int64_t kFewRows = 8;
// Columns per block of few_rows_product, a multiple of 8: every block starts where Eigen's GEMV
// (C's columns 8 at a time, then 4, 2, 1) starts a group in the unsplit product, so a one-row
// product gets the very bits of one GEMV.
constexpr int64_t kColumnBlock = 32;
// Below this many multiply-adds (M * N * K) a product stays on one thread: 1 x 192 x 384 ran at
// 0.9x on two threads, 1 x 192 x 768 at 1.35x (docs/benchmarks.md, "CPU threads").
constexpr int64_t kMinThreadedWork = int64_t{1} << 17;
// Multiply-adds in a chunk of few_rows_product's blocks: ~1.5 us, several times a claim's cost.
constexpr int64_t kMinGemvWork = int64_t{1} << 15;
// Row blocks of a product of many rows start at multiples of this (see the top of the file).
constexpr int64_t kRowGranule = 16;
// A row block holds at least this many multiply-adds, about 10 us on one core (each block packs
// all of B again), and a product is cut into about kBlocksPerThread blocks per thread, so that a
// thread the system has descheduled leaves little work for the others to wait on.
constexpr int64_t kMinBlockWork = int64_t{1} << 19;
constexpr int64_t kBlocksPerThread = 2;

// A hook on a block of C's rows [r0, r1) (linear's bias before the product, its GELU after).
using RowHook = std::function<void(int64_t r0, int64_t r1)>;

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
  auto block = [&](int64_t j) {
    const int64_t n0 = j * kColumnBlock, n = j + 1 == nblocks ? N - n0 : kColumnBlock;
    for (int64_t m = 0; m < M; ++m) {
      auto c = C.row(m).segment(n0, n);
      if (accumulate)
        c.noalias() += A.row(m) * B.middleCols(n0, n);
      else
        c.noalias() = A.row(m) * B.middleCols(n0, n);
    }
  };
  // A chunk of the threads takes several blocks: a block alone is well under a microsecond.
  const int64_t per_chunk = M * N * K < kMinThreadedWork ? nblocks
                                                          : std::max<int64_t>(1, kMinGemvWork / (kColumnBlock * K * M));
  parallel::for_range(nblocks, per_chunk, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) block(j);
  });
}

// The rows of each block of a product of M rows, N columns and depth K: all M when one thread
// should do it or is all the load leaves (parallel::usable_threads), else a multiple of
// kRowGranule. Narrow products (N or K under kRowGranule) stay whole: Eigen computes tiny blocks
// of them by other kernels (a matrix-vector product, a coefficient loop), whose bits differ.
int64_t block_rows(int64_t M, int64_t N, int64_t K) {
  if (M * N * K < kMinThreadedWork || N < kRowGranule || K < kRowGranule) return M;
  const int64_t threads = parallel::usable_threads();
  if (threads == 1) return M;
  auto round_up = [](int64_t x) { return (x + kRowGranule - 1) / kRowGranule * kRowGranule; };
  const int64_t by_threads = round_up((M + threads * kBlocksPerThread - 1) / (threads * kBlocksPerThread));
  const int64_t by_work = round_up((kMinBlockWork + N * K - 1) / (N * K));
  return std::min(M, std::max(by_threads, by_work));
}

// Blocks of `rows` rows that cover M rows, the last ending at M: it is the shortest, so the
// threads' shares stay even, but never under kRowGranule rows (a block of one row would be
// Eigen's matrix-vector product, other bits): a shorter remainder joins the block before it.
int64_t row_block_count(int64_t M, int64_t rows) {
  const int64_t blocks = (M + rows - 1) / rows;
  return blocks > 1 && M - (blocks - 1) * rows < kRowGranule ? blocks - 1 : blocks;
}

// C (M, N) [+]= A (M, K) @ B (K, N) for M > kFewRows in row blocks over the threads; before(r0, r1)
// and after(r0, r1), when set, run on each block around its product.
template <typename MatA, typename MatB, typename MatC>
void row_blocks_product(const MatA& A, const MatB& B, MatC& C, bool accumulate, const RowHook* before,
                        const RowHook* after) {
  const int64_t M = C.rows(), rows = block_rows(M, C.cols(), A.cols()), blocks = row_block_count(M, rows);
  parallel::for_each_chunk(blocks, [&](int64_t i) {
    const int64_t r0 = i * rows, r1 = i + 1 == blocks ? M : r0 + rows;
    if (before) (*before)(r0, r1);
    auto c = C.middleRows(r0, r1 - r0);
    if (accumulate)
      c.noalias() += A.middleRows(r0, r1 - r0) * B;
    else
      c.noalias() = A.middleRows(r0, r1 - r0) * B;
    if (after) (*after)(r0, r1);
  });
}

// C (M, N) [+]= A (M, K) @ B (K, N) on raw pointers; ldc is C's row stride. The hooks run on
// blocks of C's rows around their products (all M rows at once for a few-row product).
template <typename T>
void gemm2d(const T* a, Layout la, const T* b, Layout lb, T* c, int64_t ldc, int64_t M, int64_t K, int64_t N,
            bool accumulate, const RowHook* before = nullptr, const RowHook* after = nullptr) {
  using Stride = Eigen::OuterStride<>;
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  if (M == 0 || N == 0) return;
  Eigen::Map<RowMat, 0, Stride> C(c, M, N, Stride(ldc));
  if (K == 0) {  // an empty sum
    if (before) (*before)(0, M);
    if (!accumulate) C.setZero();
    if (after) (*after)(0, M);
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
      if (M > kFewRows) return row_blocks_product(A, B, C, accumulate, before, after);
      if (before) (*before)(0, M);
      few_rows_product(A, B, C, accumulate);
      if (after) (*after)(0, M);
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
  // One product per chunk when there are enough to go round or each is too small to split;
  // else the products one after another, each split over the threads. Either way every product
  // is computed as alone (see the top of the file), so the bits are the same.
  const bool by_batch = nbatch > 1 && nbatch * M * N * K >= kMinThreadedWork &&
                        (nbatch >= parallel::threads() || M * N * K <= (int64_t{1} << 18));
  visit_dtype<CpuFloat>(a.dtype(), "matmul", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    auto one = [&](int64_t i) { gemm2d<T>(pa + oa[i], la, pb + ob[i], lb, po + i * M * N, N, M, K, N, false); };
    if (by_batch)
      parallel::for_each_chunk(nbatch, one);
    else
      for (int64_t i = 0; i < nbatch; ++i) one(i);
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

// x (..., K), weight (N, K), bias (N) or undefined, out (..., N) contiguous -> out
void linear_into(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const RowEpilogue& after) {
  visit_dtype<CpuFloat>(x.dtype(), "linear", []<typename T>() {});  // refuse half types as linear, not matmul
  const int64_t N = weight.size(0);
  Tensor x2 = rows2d(x);
  const int64_t R = x2.size(0);
  Tensor o2 = out.as_strided({R, N}, {N, 1}, out.offset());
  Tensor pb = bias.defined() ? bias.detach().contiguous() : Tensor();
  RowHook start;  // each block of rows starts from the bias, then the product accumulates into it
  if (bias.defined())
    visit_dtype<CpuFloat>(x.dtype(), "linear", [&]<typename T>() {
      start = [b = pb.data<T>(), o = o2.data<T>(), N](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::copy(b, b + N, o + r * N);
      };
    });
  Tensor pa = mappable(x2), pw = mappable(transpose_last(weight));
  const int64_t K = x2.size(1);
  visit_dtype<CpuFloat>(x.dtype(), "linear", [&]<typename T>() {
    gemm2d<T>(pa.data<T>(), layout_of(pa), pw.data<T>(), layout_of(pw), o2.data<T>(), N, R, K, N, bias.defined(),
              start ? &start : nullptr, after ? &after : nullptr);
  });
}

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  Tensor out = empty(out_shape, {x.dtype()});
  linear_into(x, weight, bias, out);
  return out;
}

// grad (..., N), weight (N, K), dx (..., K) contiguous -> dx
void linear_grad_x_into(const Tensor& grad, const Tensor& weight, Tensor& dx, const RowEpilogue& after) {
  const int64_t K = weight.size(1);
  Tensor g2 = mappable(rows2d(grad)), w = mappable(weight);
  const int64_t R = g2.size(0), N = g2.size(1);
  visit_dtype<CpuFloat>(grad.dtype(), "linear", [&]<typename T>() {
    gemm2d<T>(g2.data<T>(), layout_of(g2), w.data<T>(), layout_of(w), dx.data<T>(), K, R, N, K, false, nullptr,
              after ? &after : nullptr);
  });
}

// grad (..., N), weight (N, K) -> (..., K)
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight) {
  Shape shape = grad.shape();
  shape.back() = weight.size(1);
  Tensor dx = empty(shape, {grad.dtype()});
  linear_grad_x_into(grad, weight, dx);
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
