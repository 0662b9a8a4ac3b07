// The token drawn on the GPU (ops/sample.h) against the host's draw, for the same logits and
// Philox stream: the same id for every seed, temperature and top_k tried. On the emulated GPU the
// kernel's f64 exp is the host's, so equality is exact; on a GPU CUDA's exp could move a draw
// whose u * total lies within ulps of a boundary (docs/inference.md), which these seeds do not hit.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include "core/factory.h"
#include "core/random.h"
#include "cuda_test.h"
#include "ops/sample.h"
#include "ops/shape.h"

using namespace keel;

namespace {
const Device kGpu = Device::cuda(0);

// The host's id for logits (V) and the stream (key, base).
int64_t host_draw(const Tensor& logits, double temperature, int64_t top_k, uint64_t key, uint64_t base) {
  const std::vector<float> l = logits.to(DType::f32).to_vector<float>();
  return sample_top_k_host(l.data(), int64_t(l.size()), temperature, top_k, philox_uniform(key, base, 0));
}
}  // namespace

TEST_CASE("a token drawn on the GPU is the host's draw: temperatures, top-k, ties, bf16") {
  KEEL_REQUIRE_CUDA();
  Generator gen(21);
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t V : {7, 300, 5000}) {
      // Rounded to a quarter, so that many logits tie and the order's tie-break is exercised.
      std::vector<float> l = randn({V}, gen).to_vector<float>();
      for (float& x : l) x = std::round(x * 8.0f) * 0.25f;
      const Tensor logits = from_vector(l, {V}).to(dt);
      const Tensor dev_logits = reshape(logits.to(kGpu), {1, 1, V});
      for (double temperature : {0.0, 0.5, 1.0, 3.0})
        for (int64_t top_k : {int64_t(1), int64_t(5), int64_t(40), int64_t(0)}) {
          if (top_k == 0 && V > kMaxDeviceTopK) continue;
          std::set<int64_t> ids;
          for (uint64_t base = 0; base < 24; base += 3) {
            CAPTURE(V);
            CAPTURE(temperature);
            CAPTURE(top_k);
            CAPTURE(base);
            const Tensor id = sample_top_k(dev_logits, temperature, top_k, 77, base);
            REQUIRE(id.device() == kGpu);
            CHECK(id.dtype() == DType::i64);
            ids.insert(id.to_vector<int64_t>()[0]);
            CHECK(id.to_vector<int64_t>()[0] == host_draw(logits, temperature, top_k, 77, base));
          }
          if (temperature >= 1 && top_k != 1 && V >= 300) CHECK(ids.size() > 1);  // the draws vary
        }
    }
}

TEST_CASE("a draw on the GPU refuses a top_k it does not keep, and bad logits") {
  KEEL_REQUIRE_CUDA();
  const Tensor logits = zeros({kMaxDeviceTopK + 1}, {DType::f32, kGpu});
  CHECK_THROWS_AS(sample_top_k(logits, 1.0, 0, 1, 0), ValueError);
  CHECK(sample_top_k(logits, 1.0, kMaxDeviceTopK, 1, 0).to_vector<int64_t>()[0] < kMaxDeviceTopK);
  CHECK_THROWS_AS(sample_top_k(logits, -1.0, 5, 1, 0), ValueError);
  CHECK_THROWS_AS(sample_top_k(zeros({2, 3}, {DType::f32, kGpu}), 1.0, 5, 1, 0), ShapeError);
}
