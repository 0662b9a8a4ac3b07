// attention_packed on the CPU: the same bits as attention() on split, transposed heads, and its
// argument checks.
#include "attention_packed_check.h"

using namespace keel;
using namespace keel::attention_test;

TEST_CASE("attention_packed gives attention()'s bits on the CPU: output, statistics, gradient") {
  for (DType dt : {DType::f32, DType::f64}) check_packed_cases(Device::cpu(), dt);
}

TEST_CASE("attention_packed rejects a qkv that is not (B, T, 3C) with C a multiple of the heads") {
  Generator gen(3);
  CHECK_THROWS_AS(attention_packed(randn({2, 5, 12}, gen), AttentionSpec::mhsa(3)), ShapeError);  // C = 4
  CHECK_THROWS_AS(attention_packed(randn({2, 5, 13}, gen), AttentionSpec::mhsa(1)), ShapeError);
  CHECK_THROWS_AS(attention_packed(randn({5, 18}, gen), AttentionSpec::mhsa(2)), ShapeError);
  CHECK_THROWS_AS(attention_packed(randn({2, 5, 18}, gen), AttentionSpec{0, {}, 0}), ShapeError);
  CHECK_THROWS_AS(attention_packed(Tensor(), AttentionSpec::mhsa(2)), ValueError);
}
