// Embedding lookup and dropout.
#include <doctest/doctest.h>

#include "gradcheck.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/reduce.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

TEST_CASE("embedding picks rows, its gradient scatter-adds repeated ids") {
  Tensor w = from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor ids = from_vector<int64_t>({2, 0, 2, 1}, {2, 2});
  Tensor e = embedding(w, ids);
  CHECK(e.shape() == Shape{2, 2, 2});
  CHECK(e.to_vector<float>() == std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11});
  CHECK(embedding(w, ids.to(DType::i32)).to_vector<float>() == e.to_vector<float>());

  Generator gen(5);
  Tensor wl = leaf({5, 3}, gen);
  Tensor rep = from_vector<int32_t>({4, 1, 4, 4, 0}, {5});
  CHECK(gradcheck([&](const std::vector<Tensor>& v) { return embedding(v[0], rep); }, {wl}));
}

TEST_CASE("embedding rejects bad ids, dtypes and devices") {
  Tensor w = zeros({3, 2});
  CHECK_THROWS_AS(embedding(w, from_vector<int64_t>({3}, {1})), IndexError);
  CHECK_THROWS_AS(embedding(w, from_vector<int64_t>({-1}, {1})), IndexError);
  CHECK_THROWS_AS(embedding(w, zeros({2})), DTypeError);
  CHECK_THROWS_AS(embedding(zeros({3}), from_vector<int64_t>({0}, {1})), ShapeError);
  CHECK_THROWS_AS(embedding(w, empty({0}, {DType::i64, Device::cuda(0)})), DeviceError);
}

TEST_CASE("dropout is seeded, scales survivors, and is the identity in eval") {
  Tensor x = ones({1000});
  Generator g1(42), g2(42), g3(43);
  auto a = dropout(x, 0.25, g1).to_vector<float>();
  auto b = dropout(x, 0.25, g2).to_vector<float>();
  auto c = dropout(x, 0.25, g3).to_vector<float>();
  CHECK(a == b);
  CHECK(a != c);
  int kept = 0;
  for (float v : a) {
    CHECK((v == 0.0f || v == doctest::Approx(1.0f / 0.75f)));
    kept += v != 0.0f;
  }
  CHECK(kept > 700);
  CHECK(kept < 800);
  CHECK(g1.offset() == 250);  // 1000 elements, 4 per Philox block
  Generator g4(1);
  CHECK(dropout(x, 0.5, g4, /*training=*/false).storage() == x.storage());
  CHECK_THROWS_AS(dropout(x, 1.0, g4), ValueError);
  CHECK_THROWS_AS(dropout(x, -0.1, g4), ValueError);
}

TEST_CASE("dropout gradient uses the same mask") {
  Generator gen(9);
  Tensor x = leaf({4, 6}, gen);
  // A fresh generator per call so every evaluation draws the same mask.
  CHECK(gradcheck([](const std::vector<Tensor>& v) { Generator g(77); return dropout(v[0], 0.3, g); }, {x}));
}
