// Tensor handles, views on shared storage, copies, dtypes and printing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/factory.h"

using namespace keel;

TEST_CASE("a tensor is a shared handle: copies see the same data") {
  Tensor a = zeros({2, 3});
  Tensor b = a;
  b.data<float>()[4] = 7.0f;
  CHECK(a.to_vector<float>()[4] == 7.0f);
  CHECK(a.numel() == 6);
  CHECK(a.dim() == 2);
  CHECK(a.size(-1) == 3);
  CHECK(a.is_contiguous());
  CHECK(a.strides() == Shape{3, 1});
}

TEST_CASE("as_strided views share storage, contiguous() packs them") {
  Tensor a = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = a.as_strided({3, 2}, {1, 3}, 0);  // the transpose
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.storage() == a.storage());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != a.storage());
  CHECK(c.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor same = a.contiguous();
  CHECK(same.storage() == a.storage());
}

TEST_CASE("dtype conversions round as documented") {
  Tensor a = from_vector<float>({1.0f, -2.5f, 3.14159f, 65504.0f, 1e-8f, 70000.0f}, {6});
  auto h = a.to(DType::f16).to_vector<float>();
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == -2.5f);
  CHECK(h[2] == doctest::Approx(3.140625f));  // nearest f16
  CHECK(h[3] == 65504.0f);                    // largest finite f16
  CHECK(h[4] == doctest::Approx(0.0f).epsilon(1e-7));
  CHECK(std::isinf(h[5]));
  auto b = a.to(DType::bf16).to_vector<float>();
  CHECK(b[0] == 1.0f);
  CHECK(b[2] == doctest::Approx(3.140625f));  // bf16 keeps 8 bits of mantissa
  auto i = from_vector<float>({1.9f, -1.9f}, {2}).to(DType::i64).to_vector<int64_t>();
  CHECK(i == std::vector<int64_t>{1, -1});  // truncation toward zero, as C++ and PyTorch do
}

TEST_CASE("integer copies are exact: i64 above 2^53 survives, i64 -> i32 keeps the low 32 bits") {
  constexpr int64_t big = (int64_t{1} << 53) + 1;  // the first integer a double cannot hold
  const std::vector<int64_t> v = {big,       std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                  -big,      (int64_t{1} << 32) + 5,              -1,
                                  0,         int64_t{1} << 31};
  Tensor a = from_vector<int64_t>(v, {2, 4});
  // a transposed (4, 2): element (i, j) is v[j * 4 + i].
  std::vector<int64_t> vt;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) vt.push_back(v[j * 4 + i]);
  Tensor t = a.as_strided({4, 2}, {1, 4}, 0);
  CHECK(t.contiguous().to_vector<int64_t>() == vt);  // strided -> packed, same dtype
  Tensor dst = zeros({2, 4}, {DType::i64}).as_strided({4, 2}, {1, 4}, 0);
  copy_(dst, t.contiguous());                          // packed -> strided
  CHECK(dst.to_vector<int64_t>() == vt);

  std::vector<int32_t> low, low_t;
  for (int64_t x : v) low.push_back(static_cast<int32_t>(x));  // C++20: modulo 2^32
  for (int64_t x : vt) low_t.push_back(static_cast<int32_t>(x));
  CHECK(low[0] == 1);
  CHECK(low[1] == -1);
  CHECK(low[4] == 5);
  CHECK(a.to(DType::i32).to_vector<int32_t>() == low);
  CHECK(t.to(DType::i32).to_vector<int32_t>() == low_t);

  const std::vector<int32_t> w = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), -1, 7};
  CHECK(from_vector<int32_t>(w, {4}).to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>(w.begin(), w.end()));
}

TEST_CASE("f16 conversion matches IEEE for every half value") {
  // Every finite f16 bit pattern converts to float and back to itself.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    f16 h;
    h.bits = static_cast<uint16_t>(bits);
    float f = h;
    if (std::isnan(f)) continue;
    CHECK_MESSAGE(f16(f).bits == bits, "bits " << bits);
  }
}

TEST_CASE("factories and item") {
  CHECK(full({2, 2}, 3.5).to_vector<float>() == std::vector<float>(4, 3.5f));
  CHECK(scalar(2.0, {DType::f64}).item() == 2.0);
  CHECK(arange(4, {DType::i32}).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3});
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_AS(zeros({2, 2}).item(), ShapeError);
  CHECK_THROWS_AS(zeros({-1}), ShapeError);
  CHECK_THROWS_AS(Tensor().shape(), ValueError);
  CHECK_THROWS_AS(zeros({2}).data<double>(), DTypeError);
}

TEST_CASE("printing is readable") {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  std::string s = a.str();
  CHECK(s.find("tensor([[") == 0);
  CHECK(s.find("shape=[2, 2], dtype=f32") != std::string::npos);
  Tensor big = zeros({100, 100});
  CHECK(big.str().find("...") != std::string::npos);
}

TEST_CASE("an allocation the machine cannot satisfy is an OutOfMemoryError, not a crash") {
  try {
    (void)empty({int64_t(1) << 50});  // 4 PiB of f32
    FAIL("no error");
  } catch (const OutOfMemoryError& e) {
    CHECK(std::string(e.what()).find("could not allocate") != std::string::npos);
    CHECK_FALSE(e.hint().empty());
  }
}

TEST_CASE("strided copies with packed rows: heads transposed, a slice of a cache written in place") {
  // x (B=2, T=3, H=4, D=9) viewed as (B, H, T, D): rows of D stay packed, everything else strides.
  std::vector<float> v(2 * 3 * 4 * 9);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const Tensor x = from_vector(v, {2, 3, 4, 9});
  const Tensor xt = x.as_strided({2, 4, 3, 9}, {108, 9, 36, 1}, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int t = 0; t < 3; ++t)
        for (int d = 0; d < 9; ++d) want.push_back(v[((b * 3 + t) * 4 + h) * 9 + d]);
  CHECK(xt.contiguous().to_vector<float>() == want);
  // Into slots [2, 5) of a (2, 4, 8, 9) cache: both sides strided, the rest of the cache untouched.
  Tensor cache = full({2, 4, 8, 9}, -1.0);
  Tensor slots = cache.as_strided({2, 4, 3, 9}, {288, 72, 9, 1}, 2 * 9);
  copy_(slots, xt);
  const std::vector<float> c = cache.to_vector<float>();
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int s = 0; s < 8; ++s)
        for (int d = 0; d < 9; ++d) {
          const float got = c[((b * 4 + h) * 8 + s) * 9 + d];
          CHECK(got == (s >= 2 && s < 5 ? v[((b * 3 + (s - 2)) * 4 + h) * 9 + d] : -1.0f));
        }
  CHECK(xt.to(DType::f64).to_vector<double>() == std::vector<double>(want.begin(), want.end()));  // dtypes differ
}

// What SliceBackward::add_into relies on: window += g, in place, one pass, nothing else touched.
TEST_CASE("accumulate_into adds into a strided window of a larger tensor, in place") {
  Tensor acc = full({2, 3, 6}, 1.0);                          // (B, T, 3C) with C = 2: q, k, v side by side
  Tensor window = acc.as_strided({2, 3, 2}, {18, 6, 1}, 2);  // the k columns
  Tensor g = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  const Tensor gt = g.as_strided({2, 3, 2}, {6, 1, 3}, 0);   // a strided source too
  accumulate_into(window, g);
  accumulate_into(window, gt);
  const std::vector<float> a = acc.to_vector<float>(), gv = g.to_vector<float>(), gtv = gt.contiguous().to_vector<float>();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      for (int c = 0; c < 6; ++c) {
        const int i = (b * 3 + t) * 2 + (c - 2);  // index into g (row-major over the window)
        CHECK(a[(b * 3 + t) * 6 + c] == (c >= 2 && c < 4 ? 1.0f + gv[i] + gtv[i] : 1.0f));
      }
  CHECK_THROWS_AS(accumulate_into(window, g.to(DType::f64)), ValueError);  // a window keeps one dtype
}
