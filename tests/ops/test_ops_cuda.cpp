// CUDA kernels of every op against the CPU op, forward and backward, in f32, bf16 and f16.
//
// Method (design.md section 6): fresh random f32 inputs on the CPU; the device gets them in
// the dtype under test, the CPU reference gets the same rounded values in f32 (so only the
// kernel's own error is measured). Outputs and gradients are poisoned before each run: NaN
// blocks are put in the caching allocator's cache, so memory a kernel fails to write shows as
// NaN, which never passes. Error = ||out - ref|| / ||ref||, under 1e-5 for f32, 1e-2 for half
// types. Every GPU case starts with KEEL_REQUIRE_CUDA() and is reported skipped without a GPU;
// the first cases (Philox, planning helpers) are host code and run everywhere.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "core/random.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "max_nan_rows.h"
#include "ops/arith.h"
#include "ops/cpu/softmax.h"
#include "ops/cuda/plan.h"
#include "ops/cuda/softmax.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "core/cuda/runtime.h"

using namespace keel;

using namespace keel::cudatest;

// ---- host code, runs everywhere ----


TEST_CASE("cuda plan helpers: vector heads, dim collapsing, single batch strides") {
  alignas(16) static char buf[64];
  CHECK(cuda::plan::vector_head(100, 4, {buf, buf + 16}) == 0);
  CHECK(cuda::plan::vector_head(100, 4, {buf + 4}) == 3);
  CHECK(cuda::plan::vector_head(2, 4, {buf + 4}) == 2);          // clamped to n
  CHECK(cuda::plan::vector_head(100, 2, {buf + 2, buf + 4}) == 100);  // mixed alignment: scalar
  CHECK(cuda::plan::vector_head(100, 2, {buf + 6, buf + 22}) == 5);
  CHECK(cuda::plan::vector_head(0, 4, {buf}) == 0);

  // (N, C) + (C): two dims; same-shape contiguous: one dim; size-1 dims dropped.
  auto s = cuda::plan::collapse({8, 4, 6}, {{24, 6, 1}, {0, 0, 1}});
  CHECK(s.shape == std::vector<int64_t>{32, 6});
  CHECK(s.strides[0] == std::vector<int64_t>{6, 1});
  CHECK(s.strides[1] == std::vector<int64_t>{0, 1});
  s = cuda::plan::collapse({2, 3, 4}, {{12, 4, 1}, {12, 4, 1}});
  CHECK(s.shape == std::vector<int64_t>{24});
  s = cuda::plan::collapse({2, 1, 5}, {{5, 5, 1}, {0, 0, 1}});
  CHECK(s.shape == std::vector<int64_t>{2, 5});
  s = cuda::plan::collapse({3, 4}, {{1, 3}, {4, 1}});  // a transposed: nothing merges
  CHECK(s.shape == std::vector<int64_t>{3, 4});
  s = cuda::plan::collapse({1, 1}, {{1, 1}});
  CHECK(s.shape.empty());
  CHECK(cuda::plan::broadcast_strides({4, 1}, {1, 1}, {3, 4, 5}) == std::vector<int64_t>{0, 1, 0});

  CHECK(cuda::plan::single_batch_stride({4, 5}, {35, 7}) == 7);
  CHECK(cuda::plan::single_batch_stride({4, 5}, {0, 0}) == 0);
  CHECK(!cuda::plan::single_batch_stride({4, 5}, {7, 0}).has_value());  // broadcast inner only
  CHECK(!cuda::plan::single_batch_stride({4, 5}, {40, 7}).has_value());
  CHECK(cuda::plan::single_batch_stride({1, 5, 1}, {99, 3, 99}) == 3);
  CHECK(cuda::plan::single_batch_stride({}, {}) == 0);
}

// ---- GPU cases ----

TEST_CASE("cuda binary ops on same-shape contiguous operands of odd sizes") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes)
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(4099), int64_t(100003)}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(n);
      Tensor a = rnd({n}, 1), b = uni({n}, 2, 0.5, 2.0);
      compare([](const std::vector<Tensor>& t) { return add(t[0], t[1]); }, {a, b}, dt);
      compare([](const std::vector<Tensor>& t) { return sub(t[0], t[1]); }, {a, b}, dt);
      compare([](const std::vector<Tensor>& t) { return mul(t[0], t[1]); }, {a, b}, dt);
      compare([](const std::vector<Tensor>& t) { return div(t[0], t[1]); }, {a, b}, dt);
    }
}

TEST_CASE("cuda binary ops broadcast and read strided and offset views") {
  KEEL_REQUIRE_CUDA();
  const std::pair<Shape, Shape> cases[] = {{{4, 5, 6}, {6}},       {{4, 1, 6}, {5, 1}}, {{3, 1}, {1, 7}},
                                           {{2, 3, 4}, {2, 1, 4}}, {{}, {5}},           {{64, 769}, {769}},
                                           {{2, 3, 1, 5}, {3, 4, 1}}};
  for (DType dt : kDtypes)
    for (const auto& [sa, sb] : cases) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      Tensor a = rnd(sa, 3), b = uni(sb, 4, 0.5, 2.0);
      // A broadcast operand's gradient sums rounded terms that cancel: held to their size.
      const bool by_terms = true;
      compare([](const std::vector<Tensor>& t) { return add(t[0], t[1]); }, {a, b}, dt, true, std::nullopt, by_terms);
      compare([](const std::vector<Tensor>& t) { return mul(t[0], t[1]); }, {a, b}, dt, true, std::nullopt, by_terms);
      compare([](const std::vector<Tensor>& t) { return div(t[0], t[1]); }, {a, b}, dt, true, std::nullopt, by_terms);
      compare([](const std::vector<Tensor>& t) { return sub(t[1], t[0]); }, {a, b}, dt, true, std::nullopt, by_terms);
    }
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    // A transposed operand, and offset slices (off the 16-byte grid: the scalar paths).
    Tensor a = rnd({37, 41}, 5), b = rnd({41, 37}, 6), c = rnd({2, 1001}, 7);
    compare([](const std::vector<Tensor>& t) { return add(t[0], transpose(t[1], 0, 1)); }, {a, b}, dt);
    compare([](const std::vector<Tensor>& t) { return mul(slice(t[0], 1, 1, 1001), slice(t[0], 1, 0, 1000)); }, {c},
            dt);
    compare([](const std::vector<Tensor>& t) { return sub(slice(t[0], 1, 3, 1001), slice(t[0], 1, 3, 1001)); }, {c},
            dt);
  }
}

TEST_CASE("cuda unary and scalar ops") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes)
    for (int64_t n : {int64_t(5), int64_t(1031), int64_t(65537)}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(n);
      Tensor x = rnd({n}, 10), pos = uni({n}, 11, 0.1, 3.0);
      compare([](const std::vector<Tensor>& t) { return neg(t[0]); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return exp(t[0]); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return log(t[0]); }, {pos}, dt);
      compare([](const std::vector<Tensor>& t) { return tanh(t[0]); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return relu(t[0]); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return square(t[0]); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return add(t[0], 0.75); }, {x}, dt);
      compare([](const std::vector<Tensor>& t) { return mul(t[0], -1.5); }, {x}, dt);
    }
  for (DType dt : kDtypes) {  // a non-contiguous input
    Tensor x = rnd({33, 17}, 12);
    compare([](const std::vector<Tensor>& t) { return exp(transpose(t[0], 0, 1)); }, {x}, dt);
  }
}

TEST_CASE("cuda sum mean max argmax over each dim, split and unsplit paths") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // (3, 100003) dim 1 and (20000, 3) dim 0 split the reduced dim over blocks.
  const Case cases[] = {{{7, 13, 5}, 0}, {{7, 13, 5}, 1}, {{7, 13, 5}, 2}, {{3, 100003}, 1},
                        {{20000, 3}, 0}, {{512, 768}, 0}, {{1, 1}, 0},     {{9}, 0}};
  for (DType dt : kDtypes)
    for (const Case& c : cases)
      for (bool keep : {false, true}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(c.shape));
        CAPTURE(c.dim);
        Tensor x = rnd(c.shape, 20, 0.5, 1.0);
        const int64_t d = c.dim;
        compare([d, keep](const std::vector<Tensor>& t) { return sum(t[0], d, keep); }, {x}, dt);
        compare([d, keep](const std::vector<Tensor>& t) { return mean(t[0], d, keep); }, {x}, dt);
        compare([d, keep](const std::vector<Tensor>& t) { return max(t[0], d, keep); }, {x}, dt);
        Pair p = make(x, dt, false);
        poison({bytes_of(c.shape, DType::i64)});
        CHECK(argmax(p.dev, d, keep).to_vector<int64_t>() == argmax(p.ref, d, keep).to_vector<int64_t>());
      }
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    // 100003 values in [0, 1): a sum near 5e4, within f16's range (65504), split over blocks.
    compare([](const std::vector<Tensor>& t) { return sum(t[0]); }, {uni({100003}, 21, 0.0, 1.0)}, dt);
    compare([](const std::vector<Tensor>& t) { return mean(t[0]); }, {rnd({17, 3}, 22)}, dt);
  }
  // Ties: the first maximum wins, as on the CPU.
  Tensor tied = from_vector<float>({1, 3, 3, 2, 3, 0}, {2, 3}).to(kGpu);
  CHECK(argmax(tied, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(argmax(tied, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
}

TEST_CASE("cuda max and argmax follow the CPU on NaN and ties, on every kernel path") {
  KEEL_REQUIRE_CUDA();
  using keel::testing::kNanRowKinds;
  struct Layout {
    int64_t outer, n, inner;
    int64_t first_kind = 0;
  };
  // x (outer, n, inner) reduced over dim 1 (ops/cuda/reduce.cu picks the path from the shape):
  //  - inner 1, n = 50: row kernel, one block per row (a max splits only past 32768);
  //  - inner 1, n = 100000, outer 1: row kernel split over blocks (choose_splits wants 4 blocks
  //    per SM from one row and allows n / 32768 = 3 splits: 3 on any device), then the second
  //    pass over the f32 partials and their candidate indices; one tensor per kind so each kind
  //    takes this path whatever the SM count. Outer 9 as well: split on a large GPU, not on a
  //    small one;
  //  - inner 9 or 40, n = 50: column kernel, unsplit (n < 128 allows one split);
  //  - inner 9 or 40, n = 20000, outer 1: column kernel split over 1 or 2 tiles of 32
  //    columns (4 blocks per SM wanted from 1 or 2 tiles, n / 64 = 312 splits allowed: at
  //    least 2 splits on any device).
  // Kinds (tests/ops/max_nan_rows.h): NaN only, NaN first, in the middle, last, two NaNs in
  // different splits, a tie of the maximum across splits, -inf only, -inf then NaN.
  std::vector<Layout> layouts = {{kNanRowKinds, 50, 1}, {kNanRowKinds, 100000, 1}, {2, 50, kNanRowKinds},
                                 {1, 50, 40},           {1, 20000, kNanRowKinds},  {1, 20000, 40}};
  for (int64_t k = 0; k < kNanRowKinds; ++k) layouts.push_back({1, 100000, 1, k});
  for (DType dt : kDtypes)
    for (const Layout& l : layouts) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(l.outer);
      CAPTURE(l.n);
      CAPTURE(l.inner);
      CAPTURE(l.first_kind);
      Pair p = make(keel::testing::nan_rows_tensor(l.outer, l.n, l.inner, 140, l.first_kind), dt, false);
      // The CPU's answer on the same rounded values is the reference (test_reduce.cpp checks it
      // against the rule written out in max_nan_rows.h).
      const keel::testing::MaxRef cpu{max(p.ref, 1).to_vector<double>(), argmax(p.ref, 1).to_vector<int64_t>()};
      poison({bytes_of({l.outer, l.inner}, dt), bytes_of({l.outer, l.inner}, DType::i64)});
      Tensor values = max(p.dev, 1);
      CHECK(values.dtype() == dt);
      keel::testing::check_max_equals(values, argmax(p.dev, 1), cpu);
    }
  // The gradient goes to the first NaN, as on the CPU.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t d : {0, 1}) {
    Tensor host = d == 0 ? from_vector<float>({1, 7, nan, 2, 3, nan}, {3, 2}) : from_vector<float>({1, nan, 3, nan}, {1, 4});
    Tensor x = host.to(kGpu).detach().set_requires_grad(true), xr = host.detach().set_requires_grad(true);
    Tensor m = max(x, d), mr = max(xr, d);
    m.backward(ones_like(m));
    mr.backward(ones_like(mr));
    CHECK(x.grad().to_vector<float>() == xr.grad().to_vector<float>());
  }
}

TEST_CASE("cuda embedding forward and deterministic backward with repeated ids") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes)
    for (int64_t C : {int64_t(768), int64_t(13)})
      for (DType it : {DType::i32, DType::i64}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(C);
        Tensor w = rnd({1000, C}, 30), ids = ids_of({4, 67}, 50, 31, it);  // 50 distinct ids: many repeats
        compare([](const std::vector<Tensor>& t) { return embedding(t[0], t[1]); }, {w, ids}, dt);
      }
  // Bit-identical gradients run to run.
  Tensor w = rnd({50257, 64}, 32).to(kGpu).to(DType::bf16).detach().set_requires_grad(true);
  Tensor ids = ids_of({8, 512}, 300, 33).to(kGpu);
  Tensor g = rnd({8, 512, 64}, 34).to(kGpu).to(DType::bf16);
  embedding(w, ids).backward(g);
  std::vector<float> first = w.grad().to_vector<float>();
  w.zero_grad();
  embedding(w, ids).backward(g);
  CHECK(w.grad().to_vector<float>() == first);
  // Out-of-range ids raise the CPU's IndexError, at the next sync (the kernel checks them).
  CHECK_THROWS_AS(embedding(w, from_vector<int64_t>({0, 50257}, {2}).to(kGpu)).to(DType::f32).to_vector<float>(),
                  IndexError);
}

TEST_CASE("cuda embedding without a gradient checks its ids in the kernel, raised at the next sync") {
  KEEL_REQUIRE_CUDA();
  NoGradGuard no_grad;
  Tensor w = rnd({100, 64}, 40).to(kGpu);
  const Tensor bad = from_vector<int64_t>({3, 100, 7, -1}, {4}).to(kGpu);
  const cuda::Counters before = cuda::counters();
  Tensor out = embedding(w, bad);  // no read-back of the ids: nothing to wait for yet
  CHECK((cuda::counters() - before).syncs == 0);
  try {
    (void)out.to_vector<float>();  // the first synchronisation reports what the kernel found
    FAIL("no error for id 100 of a table of 100 rows");
  } catch (const IndexError& e) {
    const std::string m = e.what();
    CHECK_MESSAGE(m.find("outside the table of 100 rows") != std::string::npos, m);
    CHECK_MESSAGE((m.find("id 100 at position 1") != std::string::npos || m.find("id -1 at position 3") != std::string::npos), m);
  }
  // Reported once: the next lookup of good ids goes through, rows as on the CPU.
  const Tensor good = from_vector<int64_t>({3, 99, 0}, {3});
  CHECK(embedding(w, good.to(kGpu)).to_vector<float>() == embedding(w.to(Device::cpu()), good).to_vector<float>());
}

TEST_CASE("cuda dropout draws the CPU mask for the same generator state") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes)
    for (int64_t n : {int64_t(1), int64_t(4099), int64_t(262147)}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(n);
      Tensor x = uni({n}, 40, 0.5, 1.5);  // never 0, so a zero in the output is a dropped element
      Pair p = make(x, dt, true);
      Generator gc(123), gd(123);
      gc.advance(5), gd.advance(5);
      Tensor y_ref = dropout(p.ref, 0.3, gc);
      poison({bytes_of({n}, dt)});
      Tensor y = dropout(p.dev, 0.3, gd);
      CHECK(gc.offset() == gd.offset());
      std::vector<float> a = y.to_vector<float>(), b = y_ref.to_vector<float>();
      int64_t mismatched = 0;
      for (int64_t i = 0; i < n; ++i) mismatched += (a[i] == 0.0f) != (b[i] == 0.0f);
      CHECK(mismatched == 0);
      CHECK_CLOSE(y, y_ref, dt);
      if (dt == DType::f32) CHECK(a == b);
      Tensor r = rnd({n}, 41);
      Pair pr = make(r, dt, false);
      y_ref.backward(pr.ref);
      y.backward(pr.dev);
      CHECK_CLOSE(p.dev.grad(), p.ref.grad(), dt);
    }
}

TEST_CASE("cuda layernorm forward and backward, vector and scalar rows") {
  KEEL_REQUIRE_CUDA();
  const Shape shapes[] = {{4, 768}, {3, 5, 13}, {64, 1000}, {7, 37}, {2, 8}, {300, 64}};
  for (DType dt : kDtypes)
    for (const Shape& s : shapes)
      for (bool with_bias : {true, false}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(s));
        CAPTURE(with_bias);
        const int64_t C = s.back();
        Tensor x = rnd(s, 50, 3.0, 2.0), w = rnd({C}, 51, 1.0, 0.3), b = rnd({C}, 52);
        if (with_bias)
          compare([](const std::vector<Tensor>& t) { return layernorm(t[0], t[1], t[2]); }, {x, w, b}, dt);
        else
          compare([](const std::vector<Tensor>& t) { return layernorm(t[0], t[1], Tensor()); }, {x, w}, dt);
      }
}

TEST_CASE("cuda gelu forward and backward") {
  KEEL_REQUIRE_CUDA();
  // {1} and {3, 1031}: the scalar path (n not a multiple of the 16-byte pack); {8, 3072}: packs.
  for (DType dt : kDtypes)
    for (const Shape& s : {Shape{1}, Shape{3, 1031}, Shape{8, 3072}}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(s));
      compare([](const std::vector<Tensor>& t) { return gelu(t[0]); }, {rnd(s, 60, 0.0, 2.0)}, dt);
    }
  // A strided view (the front end packs it) whose 1024 columns per row suit the packs.
  for (DType dt : kDtypes)
    compare([](const std::vector<Tensor>& t) { return gelu(slice(t[0], 1, 1, 1025)); }, {rnd({4, 1025}, 61, 0.0, 2.0)}, dt);
}

TEST_CASE("cuda softmax and log_softmax over the last and inner dims") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{5, 1001}, -1}, {{3, 50257}, -1}, {{7, 9, 11}, 0}, {{7, 9, 11}, 1}, {{4, 1}, -1}, {{2, 64}, -1}};
  for (DType dt : kDtypes)
    for (const Case& c : cases) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(c.shape));
      CAPTURE(c.dim);
      Tensor x = rnd(c.shape, 70, 0.0, 3.0);
      const int64_t d = c.dim;
      // Gradients through autograd in f32 only: see the kernel-level check below.
      const bool grads = dt == DType::f32;
      compare([d](const std::vector<Tensor>& t) { return softmax(t[0], d); }, {x}, dt, grads);
      compare([d](const std::vector<Tensor>& t) { return log_softmax(t[0], d); }, {x}, dt, grads);
    }
  // The backward kernels on exactly the inputs the device's backward gets, its own forward
  // output y (rounded to dt) and a rounded upstream gradient, against the CPU kernel fed the same
  // values in f32 (design.md section 6). Through autograd the CPU would use its own unrounded y,
  // and with a peaked y, y (g - sum g y) subtracts nearly equal numbers: it magnifies the
  // rounding of y in bf16 past any tolerance, on any device.
  for (DType dt : kDtypes)
    for (const Case& c : cases)
      for (bool log : {false, true}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(c.shape));
        CAPTURE(c.dim);
        CAPTURE(log);
        const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
        const Tensor y = cuda::softmax_forward(rnd(c.shape, 70, 0.0, 3.0).to(kGpu).to(dt), d, log);
        const Tensor g = rnd(c.shape, 71).to(kGpu).to(dt);
        poison({bytes_of(c.shape, dt)});
        const Tensor dx = cuda::softmax_backward(y, g, d, log);
        const Tensor ref =
            cpu::softmax_backward(y.to(Device::cpu()).to(DType::f32), g.to(Device::cpu()).to(DType::f32), d, log);
        CHECK(dx.dtype() == dt);
        CHECK_CLOSE(dx, ref, dt);
      }
}

TEST_CASE("cuda kernels refuse f64 with DTypeError") {
  KEEL_REQUIRE_CUDA();
  Tensor x = rnd({4, 4}, 130).to(DType::f64).to(kGpu);
  CHECK_THROWS_AS(add(x, x), DTypeError);
  CHECK_THROWS_AS(matmul(x, x), DTypeError);
  CHECK_THROWS_AS(softmax(x), DTypeError);
  CHECK_THROWS_AS(gelu(x), DTypeError);
}
