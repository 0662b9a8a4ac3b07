// The CUDA decode attention kernel (ops/cuda/decode_attention.cu) against the CPU op, on the
// same rounded inputs, with poisoned outputs: long caches split over several blocks, rings that
// wrap, windows beyond the text, soft-capping, several queries, every dtype and kernel width.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/factory.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/decode_attention.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

namespace {

struct DecodeCase {
  int64_t B, H, t, D, S, position;
  std::vector<int64_t> window;
  double softcap = 0;
};

// q (B, H, t, D) and a cache (B, H, S, D) whose slots past position + t are NaN when the cache
// is longer than the text (a global cache with room to grow): the kernel must never read them.
void check_decode(const DecodeCase& c, DType dt, uint64_t seed) {
  CAPTURE(dtype_name(dt));
  CAPTURE(c.D);
  CAPTURE(c.S);
  CAPTURE(c.position);
  const int64_t used = std::min(c.S, c.position + c.t);
  auto cache = [&](uint64_t s) {
    Tensor x = rnd({c.B, c.H, used, c.D}, s);
    if (used == c.S) return x;
    return concat({x, full({c.B, c.H, c.S - used, c.D}, std::numeric_limits<double>::quiet_NaN())}, 2);
  };
  const AttentionSpec spec{0, c.window, c.softcap};
  compare([&](const std::vector<Tensor>& x) { return decode_attention(x[0], x[1], x[2], spec, c.position); },
          {rnd({c.B, c.H, c.t, c.D}, seed, 0.0, 2.0), cache(seed + 1), cache(seed + 2)}, dt, false);
}

}  // namespace

TEST_CASE("CUDA decode attention matches the CPU: long global caches split over blocks") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 1000;
  for (DType dt : kDtypes)
    for (int64_t D : {32, 64, 128}) {
      check_decode({1, 3, 1, D, 1024, 699, {0, 0, 0}}, dt, seed += 3);  // 700 keys: three chunks per row
      check_decode({2, 2, 1, D, 40, 39, {0, 0}}, dt, seed += 3);        // one chunk, a full cache
    }
}

TEST_CASE("CUDA decode attention matches the CPU: every kernel width, with head dims padded below it") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 3000;
  for (DType dt : kDtypes)
    for (int64_t D : {8, 16, 24, 40, 72, 96, 136, 256}) {  // a column per thread, groups, two per thread
      check_decode({1, 2, 1, D, 1024, 699, {0, 50}}, dt, seed += 3);  // three chunks for the global head
      check_decode({1, 1, 2, D, 40, 30, {0}}, dt, seed += 3);         // one chunk, two queries
    }
}

TEST_CASE("CUDA decode attention matches the CPU: rings, windows beyond the text, soft-capping, several queries") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 2000;
  for (DType dt : kDtypes) {
    check_decode({2, 3, 1, 32, 50, 677, {50, 20, 1}}, dt, seed += 3);            // a ring that has wrapped
    check_decode({1, 6, 1, 32, 50, 30, {50, 50, 50, 50, 50, 50}}, dt, seed += 3);  // window beyond the text
    check_decode({1, 2, 1, 64, 300, 299, {0, 100}, 2.0}, dt, seed += 3);         // the cap bites
    check_decode({2, 2, 3, 64, 512, 400, {0, 0}}, dt, seed += 3);                // three queries at once
  }
}
