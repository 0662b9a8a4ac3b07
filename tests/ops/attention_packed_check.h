// attention_packed (ops/attention.h) against attention() on the split, transposed heads, on one
// device and dtype: the kernels do the same arithmetic whatever the rows' layout, so the output,
// the statistics and the (B, T, 3C) gradient must be the same bits. Shared by the CPU test and
// the CUDA one.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "ops/attention.h"
#include "ops/shape.h"

namespace keel::attention_test {

// Every element equal, in logical order, NaN matching NaN. A zero's sign may differ: the split
// path adds each third's gradient into zeros, and 0 + -0 = +0.
inline bool same_values(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.detach().to(Device::cpu()).to_vector<double>();
  const std::vector<double> y = b.detach().to(Device::cpu()).to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (x[i] != x[i] && y[i] != y[i]))) return false;
  return true;
}

// qkv (B, T, 3C) on dev in dt; spec over H heads.
inline void check_packed_matches_split(Device dev, DType dt, int64_t B, int64_t T, int64_t H, int64_t D,
                                       const AttentionSpec& spec, uint64_t seed) {
  const int64_t C = H * D;
  Generator gen(seed);
  const Tensor x = randn({B, T, 3 * C}, gen).to(dt).to(dev);
  const Tensor g = randn({B, T, C}, gen).to(dt).to(dev);

  Tensor a = x.detach().set_requires_grad(true);
  AttentionResult packed = attention_packed(a, spec);
  REQUIRE(packed.out.shape() == Shape{B, T, C});
  packed.out.backward(g);

  Tensor b = x.detach().set_requires_grad(true);
  std::vector<Tensor> qkv = split(b, {C, C, C}, -1);
  for (Tensor& t : qkv) t = transpose(reshape(t, {B, T, H, D}), 1, 2);
  AttentionResult split_heads = attention(qkv[0], qkv[1], qkv[2], spec);
  const Tensor out = reshape(transpose(split_heads.out, 1, 2), {B, T, C});
  out.backward(g);

  CHECK(same_values(packed.out, out));
  CHECK(same_values(packed.max_logit, split_heads.max_logit));
  CHECK(same_values(packed.max_range, split_heads.max_range));
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shape() == x.shape());
  CHECK(same_values(a.grad(), b.grad()));
}

// The cases every device runs: MHSA; LS with windows inside, at and past a tile; a soft cap; a
// negative scale (the CUDA kernels' -q path); a head dim below its kernel width; T = 1.
inline void check_packed_cases(Device dev, DType dt) {
  struct Case {
    const char* what;
    int64_t B, T, H, D;
    AttentionSpec spec;
  };
  const std::vector<Case> cases = {
      {"MHSA", 2, 90, 3, 64, AttentionSpec::mhsa(3)},
      {"LS windows 5 and 40", 2, 90, 3, 64, AttentionSpec{0, {5, 40, 0}, 0}},
      {"soft cap 5, scale 0.3", 1, 70, 2, 32, AttentionSpec{0.3, {0, 7}, 5.0}},
      {"negative scale", 1, 70, 2, 32, AttentionSpec{-0.2, {0, 7}, 0}},
      {"head dim 40 (a 64-wide kernel)", 2, 33, 2, 40, AttentionSpec{0, {0, 3}, 0}},
      {"one position", 3, 1, 2, 16, AttentionSpec::mhsa(2)},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) {
    const std::string what = std::string(dtype_name(dt)) + " " + c.what;
    INFO(what);
    check_packed_matches_split(dev, dt, c.B, c.T, c.H, c.D, c.spec, seed++);
  }
}

}  // namespace keel::attention_test
