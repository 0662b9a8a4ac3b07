// The token draw of ops/sample.h on the CPU: the host reference, through the op's front end.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/random.h"
#include "ops/sample.h"

using namespace keel;

TEST_CASE("sample_top_k on the CPU is the host draw, with u from the Philox stream") {
  const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f, 1.5f, 0.0f};
  const Tensor logits = from_vector(l, {1, 1, 6});
  for (uint64_t base = 0; base < 16; ++base)
    for (int64_t k : {0, 1, 3}) {
      const Tensor id = sample_top_k(logits, 1.0, k, 9, base);
      CHECK(id.dtype() == DType::i64);
      CHECK(id.to_vector<int64_t>()[0] == sample_top_k_host(l.data(), 6, 1.0, k, philox_uniform(9, base, 0)));
    }
  // Greedy, and top-k 1: the first of the tied largest.
  CHECK(sample_top_k(logits, 0.0, 0, 9, 0).to_vector<int64_t>()[0] == 1);
  CHECK(sample_top_k_host(l.data(), 6, 2.0, 1, 0.99f) == 1);
  // u = 1 reaches the end of the running sum: the last candidate.
  CHECK(sample_top_k_host(l.data(), 6, 1.0, 2, 1.0f) == 2);
}

TEST_CASE("sample_top_k: bad input") {
  const std::vector<float> l = {0.0f, 1.0f};
  CHECK_THROWS_AS(sample_top_k(from_vector(l, {2}), -0.5, 0, 1, 0), ValueError);
  CHECK_THROWS_AS(sample_top_k(zeros({2, 2}), 1.0, 0, 1, 0), ShapeError);
  CHECK_THROWS_AS(sample_top_k(Tensor(), 1.0, 0, 1, 0), ShapeError);
  CHECK_THROWS_AS(sample_top_k_host(l.data(), 0, 1.0, 0, 0.5f), ValueError);
}
