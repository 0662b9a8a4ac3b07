// The autograd engine, exercised through real ops: diamonds, reuse, views of views,
// no_grad, detach, freed graphs and the errors a user meets first.
#include <doctest/doctest.h>

#include "gradcheck.h"
#include "ops/arith.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace keel;

namespace {
Tensor param(std::vector<double> v, Shape s) { return from_vector(v, s, {DType::f64, Device::cpu(), true}); }
}  // namespace

TEST_CASE("a diamond graph sums the gradients of both paths") {
  Tensor x = param({2.0}, {1});
  Tensor a = x * 3.0;  // da/dx = 3
  Tensor b = square(x);  // db/dx = 2x = 4
  Tensor y = sum(a * b);  // y = 3x^3, dy/dx = 9x^2 = 36
  y.backward();
  CHECK(x.grad().item() == doctest::Approx(36.0));
}

TEST_CASE("a tensor used twice receives both contributions, and leaves accumulate with +=") {
  Tensor x = param({1.0, 2.0}, {2});
  sum(x * x).backward();  // 2x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 4.0});
  sum(x * 3.0).backward();  // += 3
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5.0, 7.0});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a gradient buffer: the first backward after zero_grad writes into it (converted), the next add") {
  Tensor x = from_vector<float>({1.0f, 2.0f}, {2}).set_requires_grad(true);
  Tensor buffer = from_vector<double>({7.0, -7.0}, {2});  // stale contents: never added to
  x.set_grad_buffer(buffer);
  CHECK_FALSE(x.grad().defined());  // a buffer is not a gradient
  sum(mul(x, 3.0)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(x.grad().raw_data() == buffer.raw_data());
  CHECK(buffer.to_vector<double>() == std::vector<double>{3.0, 3.0});
  sum(mul(x, x)).backward();  // += 2x
  CHECK(buffer.to_vector<double>() == std::vector<double>{5.0, 7.0});
  x.zero_grad();  // drops the gradient, keeps the buffer
  CHECK_FALSE(x.grad().defined());
  sum(x).backward();
  CHECK(x.grad().raw_data() == buffer.raw_data());
  CHECK(buffer.to_vector<double>() == std::vector<double>{1.0, 1.0});
  x.set_grad_buffer({});  // removed: the next gradient gets memory of its own, in x's dtype
  x.zero_grad();
  sum(x).backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().raw_data() != buffer.raw_data());

  CHECK_THROWS_AS(x.set_grad_buffer(zeros({3})), ShapeError);
  CHECK_THROWS_AS(x.set_grad_buffer(zeros({2}, {DType::i32})), ValueError);
  CHECK_THROWS_AS(x.set_grad_buffer(zeros({4}).as_strided({2}, {2}, 0)), ValueError);  // every other element
}

TEST_CASE("gradients through views of views reach the base leaf") {
  Tensor x = param({0, 1, 2, 3, 4, 5}, {6});
  Tensor v = slice(transpose(reshape(x, {2, 3}), 0, 1), 0, 1, 3);  // rows 1..2 of the transpose
  sum(v * v).backward();
  // v holds x[1], x[4], x[2], x[5]; d/dx of x^2 = 2x there, 0 elsewhere.
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 2, 4, 0, 8, 10});
}

TEST_CASE("no_grad records nothing, detach cuts the history") {
  Tensor x = param({1.0}, {1});
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(grad_enabled());
  Tensor y = x * 2.0;
  CHECK(y.requires_grad());
  CHECK(std::string(y.grad_fn()->name()) == "MulScalarBackward");
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == y.storage());
  Tensor z = sum(d * x);  // d is a constant here
  z.backward();
  CHECK(x.grad().item() == doctest::Approx(2.0));
}

TEST_CASE("a second backward through a freed graph raises a clear error") {
  Tensor x = param({1.0, 2.0}, {2});
  Tensor y = sum(x * x);
  y.backward();
  try {
    y.backward();
    FAIL("no error");
  } catch (const AutogradError& e) {
    CHECK(std::string(e.what()).find("already freed") != std::string::npos);
  }
  Tensor z = sum(x * x);
  z.backward({}, /*retain_graph=*/true);
  z.backward();  // allowed once more
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2 + 4, 4 + 8});
}

TEST_CASE("backward frees what the nodes saved") {
  Tensor x = param({1.0, 2.0}, {2});
  Tensor w = from_vector<double>({3.0, 4.0}, {2});
  Tensor y = sum(x * w);
  long before = w.storage().use_count();
  y.backward();
  CHECK(w.storage().use_count() < before);  // MulBackward let go of its saved copy
}

TEST_CASE("backward on a non-scalar needs an explicit gradient") {
  Tensor x = param({1.0, 2.0}, {2});
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.backward(), AutogradError);
  CHECK_THROWS_AS(y.backward(ones({3}, {DType::f64})), ShapeError);
  y.backward(from_vector<double>({1.0, 10.0}, {2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 20.0});
  CHECK_THROWS_AS(from_vector<double>({1.0}, {1}).backward(), AutogradError);  // needs no grad
}

TEST_CASE("requires_grad is for floating leaves") {
  Tensor x = param({1.0}, {1});
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.set_requires_grad(false), AutogradError);
  CHECK_THROWS_AS(zeros({2}, {DType::i64}).set_requires_grad(true), DTypeError);
}

TEST_CASE("contiguous, clone and dtype casts pass gradients through") {
  Tensor x = param({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = transpose(x, 0, 1).contiguous().clone().to(DType::f32);
  CHECK(y.dtype() == DType::f32);
  sum(y * from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2})).backward();
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("a long chain does not overflow the stack, in backward or when it is dropped") {
  Tensor x = param({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y + 0.0;
  sum(y).backward();
  CHECK(x.grad().item() == 1.0);
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z * 1.0;
  z = Tensor();  // never backpropagated: the graph is destroyed with the tensor
  CHECK(x.grad().item() == 1.0);
}
