// README.md, "A first program": the code, as printed there, runs and gives w a gradient.
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>

// snippet-begin
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
using namespace keel;
// snippet-end

TEST_CASE("README: a first program") {
  std::ostringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  // snippet-begin

  Generator gen(0);
  Tensor w = randn({3, 2}, gen, {.requires_grad = true});
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor loss = mean(square(matmul(x, w)));
  loss.backward();            // w.grad() now holds dloss/dw
  std::cout << w.grad();      // tensor([[...]], shape=[3, 2], dtype=f32)
  // snippet-end
  std::cout.rdbuf(old);
  CHECK(w.grad().defined());
  CHECK(w.grad().shape() == Shape{3, 2});
  CHECK(captured.str().find("shape=[3, 2]") != std::string::npos);
}
