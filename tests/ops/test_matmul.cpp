// matmul and linear: forward against a naive triple loop, backward against finite differences.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include "checks.h"
#include "core/parallel.h"
#include "gradcheck.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;
using keel::testing::message_has;

namespace {

// The reference: a (..., M, K) @ b (..., K, N) with NumPy batch broadcasting, in double.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, Shape* out_shape = nullptr) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  int64_t na = a.dim() - 2, nb = b.dim() - 2, n = std::max(na, nb);
  Shape batch(n);
  for (int64_t d = 0; d < n; ++d) {
    int64_t sa = d - (n - na) >= 0 ? a.shape()[d - (n - na)] : 1;
    int64_t sb = d - (n - nb) >= 0 ? b.shape()[d - (n - nb)] : 1;
    batch[d] = std::max(sa, sb);
  }
  // Flat matrix index of batch element i in an operand with `nd` batch dims of `shape`.
  auto index_in = [&](int64_t i, const Shape& shape, int64_t nd) {
    int64_t idx = 0, mul = 1;
    for (int64_t d = n - 1, td = nd - 1; d >= 0; --d, --td) {
      int64_t coord = i % batch[d];
      i /= batch[d];
      if (td < 0) continue;
      if (shape[td] != 1) idx += coord * mul;
      mul *= shape[td];
    }
    return idx;
  };
  int64_t nbatch = numel_of(batch);
  std::vector<double> out(nbatch * M * N, 0.0);
  for (int64_t i = 0; i < nbatch; ++i) {
    const double* pa = av.data() + index_in(i, a.shape(), na) * M * K;
    const double* pb = bv.data() + index_in(i, b.shape(), nb) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += pa[m * K + k] * pb[k * N + j];
        out[(i * M + m) * N + j] = s;
      }
  }
  if (out_shape) {
    *out_shape = batch;
    out_shape->push_back(M);
    out_shape->push_back(N);
  }
  return out;
}

double rel_err(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// a (R, C) -> its transpose (C, R) as a strided view on the same storage.
Tensor t_view(const Tensor& a) { return a.as_strided({a.size(1), a.size(0)}, {a.strides()[1], a.strides()[0]}, a.offset()); }

const std::vector<std::pair<Shape, Shape>> kShapes = {
    {{3, 5}, {5, 4}},          // plain 2-D
    {{7, 1}, {1, 9}},          // K = 1, odd sizes
    {{2, 3, 4}, {2, 4, 5}},    // same batch
    {{2, 3, 4}, {4, 5}},       // b shared across the batch
    {{2, 1, 3, 4}, {3, 4, 2}}, // broadcast batch dims on both sides
    {{1, 3, 4}, {2, 4, 3}},    // a broadcast
    {{4, 6}, {2, 6, 3}},       // a 2-D, b batched
};

}  // namespace

TEST_CASE("matmul forward matches a naive triple loop (f64) for many shapes") {
  Generator gen(1);
  for (auto& [sa, sb] : kShapes) {
    Tensor a = randn(sa, gen, {DType::f64}), b = randn(sb, gen, {DType::f64});
    Shape ref_shape;
    std::vector<double> ref = naive_matmul(a, b, &ref_shape);
    Tensor c = matmul(a, b);
    CHECK(c.shape() == ref_shape);
    CHECK(rel_err(c.to_vector<double>(), ref) < 1e-14);
  }
  // An empty inner dimension gives zeros, an empty batch an empty result.
  CHECK(matmul(zeros({3, 0}), zeros({0, 2})).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(matmul(zeros({0, 3, 4}), zeros({4, 2})).shape() == Shape{0, 3, 2});
}

TEST_CASE("matmul f32 agrees with the f64 reference") {
  Generator gen(2);
  // Sizes past Eigen's blocking thresholds, and a batch big enough to be spread over threads.
  for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{3, 67, 129}, {129, 33}}, {{8, 17, 40}, {8, 40, 23}}}) {
    Tensor a = randn(sa, gen), b = randn(sb, gen);
    std::vector<double> ref = naive_matmul(a, b);
    CHECK(rel_err(matmul(a, b).to_vector<double>(), ref) < 1e-5);  // f32 accumulation over K <= 129
  }
}

TEST_CASE("matmul reads non-contiguous inputs in place or packs them") {
  Generator gen(3);
  Tensor a_store = randn({5, 3}, gen, {DType::f64}), b_store = randn({4, 5}, gen, {DType::f64});
  Tensor a = t_view(a_store), b = t_view(b_store);  // (3, 5) and (5, 4), both column-major
  CHECK_FALSE(a.is_contiguous());
  CHECK(rel_err(matmul(a, b).to_vector<double>(), naive_matmul(a.contiguous(), b.contiguous())) < 1e-14);

  // A batched transpose (2, 3, 5) with strides (15, 1, 3), and every other column of a (5, 8)
  // matrix: strides (8, 2), neither unit, so the kernel must pack it.
  Tensor bt_store = randn({2, 5, 3}, gen, {DType::f64});
  Tensor bt = bt_store.as_strided({2, 3, 5}, {15, 1, 3}, 0);
  Tensor wide = randn({5, 8}, gen, {DType::f64});
  Tensor every_other = wide.as_strided({5, 4}, {8, 2}, 1);
  CHECK(rel_err(matmul(bt, every_other).to_vector<double>(),
                naive_matmul(bt.contiguous(), every_other.contiguous())) < 1e-14);

  // Gradients with respect to non-contiguous leaves land in the leaves' own (view) shapes.
  Tensor la = a.detach(), lb = b.detach();
  la.set_requires_grad(true);
  lb.set_requires_grad(true);
  Tensor g = randn({3, 4}, gen, {DType::f64});
  matmul(la, lb).backward(g);
  CHECK(rel_err(la.grad().to_vector<double>(), naive_matmul(g, t_view(b).contiguous())) < 1e-14);
  CHECK(rel_err(lb.grad().to_vector<double>(), naive_matmul(t_view(a).contiguous(), g)) < 1e-14);
}

TEST_CASE("matmul backward matches finite differences") {
  // Tolerances: f64 central differences with eps 1e-6 on a bilinear function are exact up to
  // rounding (~1e-10 relative), so the gradcheck defaults (atol 1e-7, rtol 1e-5) hold easily.
  Generator gen(4);
  for (auto& [sa, sb] : kShapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    CHECK(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                    {leaf(sa, gen), leaf(sb, gen)}));
  }
  // Only one operand requiring grad: the other is not needed.
  Tensor a = leaf({3, 4}, gen), b = randn({4, 2}, gen, {DType::f64});
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}));
}

TEST_CASE("linear forward matches x @ weight^T + bias") {
  Generator gen(5);
  Tensor x = randn({2, 3, 5}, gen, {DType::f64}), w = randn({4, 5}, gen, {DType::f64});
  Tensor bias = randn({4}, gen, {DType::f64});
  std::vector<double> ref = naive_matmul(x, t_view(w).contiguous());
  std::vector<double> bv = bias.to_vector<double>();
  Tensor y0 = linear(x, w);
  CHECK(y0.shape() == Shape{2, 3, 4});
  CHECK(rel_err(y0.to_vector<double>(), ref) < 1e-14);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 4];
  CHECK(rel_err(linear(x, w, bias).to_vector<double>(), ref) < 1e-14);
  // A single vector (K) -> (N); f32 against the f64 reference.
  Tensor v = randn({5}, gen);
  CHECK(linear(v, w.to(DType::f32)).shape() == Shape{4});
  Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), bf = bias.to(DType::f32);
  CHECK(rel_err(linear(xf, wf, bf).to_vector<double>(), ref) < 1e-6);
}

TEST_CASE("linear backward matches finite differences") {
  Generator gen(6);
  auto f = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  CHECK(gradcheck(f, {leaf({2, 3, 5}, gen), leaf({4, 5}, gen), leaf({4}, gen)}));
  CHECK(gradcheck(f, {leaf({7, 3}, gen), leaf({1, 3}, gen), leaf({1}, gen)}));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); },
                  {leaf({5}, gen), leaf({3, 5}, gen)}));
  // A frozen weight: only x gets a gradient.
  CHECK(gradcheck(f, {leaf({2, 5}, gen), randn({3, 5}, gen, {DType::f64}), leaf({3}, gen)}));
}

namespace {

// The worst row's relative error of x (R, N) against ref (R, N), both flat: one wrong row cannot
// hide in a norm over the whole result.
double worst_row_err(const std::vector<double>& x, const std::vector<double>& ref, int64_t N) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t r0 = 0; r0 < x.size(); r0 += N) {
    std::vector<double> xr(x.begin() + r0, x.begin() + r0 + N), rr(ref.begin() + r0, ref.begin() + r0 + N);
    worst = std::max(worst, rel_err(xr, rr));
  }
  return worst;
}

// keel's thread count for a scope (ctest runs with OMP_NUM_THREADS=1).
using Threads = parallel::ThreadsGuard;

// (M, K, N) with M <= 8, the products that split their columns over the threads: N below,
// at and just past a block of 32 columns and with a remainder of one column, K = 1 and odd K,
// and both sides of the work below which a product stays on one thread (2^16).
const std::vector<std::array<int64_t, 3>> kFewRowShapes = {
    {1, 200, 1001}, {1, 192, 10000}, {2, 33, 1000}, {3, 7, 4096}, {5, 129, 65},
    {8, 200, 97},   {1, 1, 70000},   {4, 64, 31},   {6, 96, 33},  {7, 40, 257},
};

}  // namespace

TEST_CASE("products of few rows, split over the threads by columns, match the reference") {
  // The decode shape: linear's x (M, K) against weight (N, K) is Eigen's GEMV on column blocks;
  // matmul with a row-major b and with a transposed a are the other two layouts.
  Generator gen(7);
  for (auto [M, K, N] : kFewRowShapes) {
    CAPTURE(M);
    CAPTURE(K);
    CAPTURE(N);
    Threads two(2);
    Tensor x = randn({M, K}, gen), w = randn({N, K}, gen), bias = randn({N}, gen);
    std::vector<double> ref = naive_matmul(x, t_view(w).contiguous()), bv = bias.to_vector<double>();
    CHECK(worst_row_err(linear(x, w).to_vector<double>(), ref, N) < 1e-5);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % N];
    CHECK(worst_row_err(linear(x, w, bias).to_vector<double>(), ref, N) < 1e-5);
    Tensor b = randn({K, N}, gen), at = t_view(randn({K, M}, gen));
    CHECK(worst_row_err(matmul(x, b).to_vector<double>(), naive_matmul(x, b), N) < 1e-5);
    CHECK(worst_row_err(matmul(at, b).to_vector<double>(), naive_matmul(at.contiguous(), b), N) < 1e-5);
  }
}

TEST_CASE("products of few rows give the same bits on any thread count and for any row alone") {
  Generator gen(8);
  for (auto [M, K, N] : kFewRowShapes) {
    CAPTURE(M);
    CAPTURE(K);
    CAPTURE(N);
    Tensor x = randn({M, K}, gen), w = randn({N, K}, gen), bias = randn({N}, gen), b = randn({K, N}, gen);
    Tensor at = t_view(randn({K, M}, gen));
    auto run = [&](int threads) {
      Threads t(threads);
      return std::vector<std::vector<float>>{linear(x, w, bias).to_vector<float>(), matmul(x, b).to_vector<float>(),
                                             matmul(at, b).to_vector<float>()};
    };
    auto one = run(1);
    CHECK(run(2) == one);
    CHECK(run(3) == one);
    // Each row is the same GEMV whatever rows come with it: decoding a sequence alone or in a
    // batch of up to 8 gives it the same logits.
    Threads two(2);
    for (int64_t m = 0; m < M; ++m) {
      std::vector<float> row = linear(x.as_strided({1, K}, {K, 1}, m * K), w, bias).to_vector<float>();
      CHECK(row == std::vector<float>(one[0].begin() + m * N, one[0].begin() + (m + 1) * N));
    }
  }
}

TEST_CASE("products of many rows, split over the threads by rows, give the same bits on any thread count") {
  // Enough work for several row blocks (ops/cpu/matmul.cpp), odd sizes, both layouts of each
  // operand; the block boundaries move with the thread count, the bits must not. 673 rows of 64
  // leave the last block a remainder: 145 rows on 2 threads and 33 on 3, short blocks of their
  // own, and 1 on 4 threads, which must join the block before it (alone it would be Eigen's
  // matrix-vector product, whose bits differ).
  const std::array<int64_t, 3> shapes[] = {{300, 129, 257}, {1000, 64, 96}, {97, 2048, 33},
                                           {2048, 16, 200}, {673, 128, 64}};
  Generator gen(9);
  for (auto [M, K, N] : shapes) {
    CAPTURE(M);
    CAPTURE(K);
    CAPTURE(N);
    Tensor x = randn({M, K}, gen), w = randn({N, K}, gen, {}, 0.0, 0.3), bias = randn({N}, gen), b = randn({K, N}, gen);
    Tensor at = t_view(randn({K, M}, gen));
    auto run = [&](int threads) {
      Threads t(threads);
      return std::vector<std::vector<float>>{linear(x, w, bias).to_vector<float>(), matmul(x, b).to_vector<float>(),
                                             matmul(at, b).to_vector<float>(),
                                             linear_gelu(x, w, bias).to_vector<float>()};
    };
    const auto one = run(1);
    CHECK(run(2) == one);
    CHECK(run(3) == one);
    CHECK(run(4) == one);
    CHECK(worst_row_err(std::vector<double>(one[1].begin(), one[1].end()), naive_matmul(x, b), N) < 1e-5);
  }
}

TEST_CASE("matmul and linear reject bad inputs with errors naming the op") {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK(message_has([&] { matmul(a, b); }, "matmul"));
  CHECK(message_has([&] { matmul(a, b); }, "[2, 3]"));
  CHECK_THROWS_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), ShapeError);  // batch 2 vs 3
  CHECK_THROWS_AS(matmul(zeros({3}), zeros({3, 2})), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({3, 2}, {DType::f64})), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}, {DType::i64}), zeros({3, 2}, {DType::i64})), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}, {DType::bf16}), zeros({3, 2}, {DType::bf16})), DTypeError);
  Tensor gpu = empty({0}, {DType::f32, Device::cuda(0)});
  CHECK_THROWS_AS(matmul(a, gpu), DeviceError);  // the device check comes before the shape check
  CHECK(message_has([&] { matmul(a, gpu); }, "matmul"));
  CHECK_THROWS_AS(matmul(a, Tensor()), ValueError);

  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK(message_has([&] { linear(zeros({2, 3}), zeros({4, 5})); }, "linear"));
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), ShapeError);
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, {DType::f64})), DTypeError);
  CHECK_THROWS_AS(linear(zeros({2, 3}), zeros({4, 3}), gpu), DeviceError);
  CHECK(message_has([] { linear(zeros({2, 3}, {DType::f16}), zeros({4, 3}, {DType::f16})); }, "linear"));
}
