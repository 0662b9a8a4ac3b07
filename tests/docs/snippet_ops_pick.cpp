// docs/ops.md, "The shape": with a long argument list, pick the kernel, then call it once.
#include <doctest/doctest.h>

#include <cmath>

#include "core/factory.h"
#include "ops/attention.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"

TEST_CASE("docs/ops.md: pick the kernel, then call it") {
  using namespace keel;
  Generator gen(3);
  Tensor q = randn({1, 2, 5, 4}, gen), qc = q, kc = randn({1, 2, 5, 4}, gen), vc = randn({1, 2, 5, 4}, gen);
  const AttentionSpec spec = AttentionSpec::ls(2, 1, 2);
  const double scale = 0.5;
  AttentionResult r{empty({1, 2, 5, 4}), empty({2}), empty({2})};
  Tensor lse = empty({1, 2, 5});
  // snippet-begin
  auto kernel = q.device().is_cuda() ? cuda::attention_forward : cpu::attention_forward;
  kernel(qc, kc, vc, spec.window, scale, spec.softcap, r.out, lse, r.max_logit, r.max_range);
  // snippet-end
  AttentionSpec scaled = spec;
  scaled.scale = scale;
  const std::vector<float> want = attention(qc, kc, vc, scaled).out.to_vector<float>(), got = r.out.to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
}
