// Shape operations: views share storage, gradients flow through views of views.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "gradcheck.h"
#include "ops/arith.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

TEST_CASE("views share storage with their input") {
  Tensor a = arange(24).to(DType::f32);
  Tensor r = reshape(a, {2, 3, 4});
  CHECK(r.storage() == a.storage());
  Tensor t = transpose(r, 0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.storage() == a.storage());
  Tensor s = slice(r, 2, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.storage() == a.storage());
  CHECK(s.to_vector<float>()[0] == 1.0f);
  CHECK(s.to_vector<float>()[1] == 3.0f);
  Tensor n = narrow(r, 1, 1, 2);
  CHECK(n.to_vector<float>()[0] == 4.0f);
  CHECK(unsqueeze(a, 0).shape() == Shape{1, 24});
  CHECK(squeeze(unsqueeze(a, 1), 1).shape() == Shape{24});
  CHECK(permute(r, {2, 0, 1}).shape() == Shape{4, 2, 3});
  CHECK(reshape(a, {4, -1}).shape() == Shape{4, 6});
  // Writing through a view is visible in the base.
  s.data<float>()[0] = 100.0f;
  CHECK(a.to_vector<float>()[1] == 100.0f);
}

TEST_CASE("reshape of a non-contiguous tensor copies, view refuses") {
  Tensor a = reshape(arange(6).to(DType::f32), {2, 3});
  Tensor t = transpose(a, 0, 1);
  Tensor r = reshape(t, {6});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(r.storage() != a.storage());
  CHECK_THROWS_AS(view(t, {6}), ShapeError);
}

TEST_CASE("concat and split") {
  Tensor a = reshape(arange(6).to(DType::f32), {2, 3});
  Tensor b = reshape(arange(4).to(DType::f32), {2, 2});
  Tensor c = concat({a, b}, 1);
  CHECK(c.shape() == Shape{2, 5});
  CHECK(c.to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 3, 4, 5, 2, 3});
  auto parts = split(c, std::vector<int64_t>{3, 2}, 1);
  CHECK(parts[0].to_vector<float>() == a.to_vector<float>());
  CHECK(parts[1].to_vector<float>() == b.to_vector<float>());
  auto even = split(arange(5).to(DType::f32), int64_t(2), 0);
  CHECK(even.size() == 3);
  CHECK(even[2].numel() == 1);
}

TEST_CASE("gradients through views, views of views, and reused tensors") {
  Generator gen(3);
  Tensor x = leaf({2, 3, 4}, gen);
  Tensor y = leaf({4, 2}, gen);
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return reshape(transpose(v[0], 0, 2), {4, 6}); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return slice(slice(v[0], 2, 1, 4), 1, 0, 3, 2); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return permute(v[0], {1, 2, 0}); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return squeeze(unsqueeze(v[0], 1), 1); }, {x}));
  CHECK(gradcheck(
      [](const std::vector<Tensor>& v) {
        Tensor t = transpose(v[1], 0, 1);                            // (2, 4)
        return concat({v[0], unsqueeze(t, 1), v[0] * 2.0}, 1);       // v[0] used twice
      },
      {x, y}));
  CHECK(gradcheck(
      [](const std::vector<Tensor>& v) {
        auto p = split(v[0], std::vector<int64_t>{1, 3}, 2);
        return mul(p[1], sum(p[0], 2, true));
      },
      {x}));
}

TEST_CASE("shape ops reject bad input") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_AS(reshape(a, {4, 2}), ShapeError);
  CHECK_THROWS_AS(reshape(a, {-1, -1}), ShapeError);
  CHECK_THROWS_AS(transpose(a, 0, 2), IndexError);
  CHECK_THROWS_AS(permute(a, {0, 0}), IndexError);
  CHECK_THROWS_AS(squeeze(a, 0), ShapeError);
  CHECK_THROWS_AS(narrow(a, 1, 2, 5), IndexError);
  CHECK_THROWS_AS(concat({a, zeros({3, 3})}, 1), ShapeError);
  CHECK_THROWS_AS(concat({a, zeros({2, 3}, {DType::f64})}, 0), DTypeError);
  CHECK_THROWS_AS(concat({zeros({0}), empty({0}, {DType::f32, Device::cuda(0)})}, 0), DeviceError);
  CHECK_THROWS_AS(split(a, std::vector<int64_t>{1, 1}, 1), ShapeError);
  CHECK_THROWS_AS(slice(a, 0, 0, 1, 0), ValueError);
}

namespace {
// The names of the backward's profiled ops, in order.
std::vector<std::string> backward_ops(Tensor loss) {
  profiler::Session session({});
  session.step_begin();
  loss.backward();
  session.step_end();
  std::vector<std::string> names;
  for (const profiler::Event& e : session.finish().events_list) names.push_back(e.name);
  return names;
}
}  // namespace

TEST_CASE("the pieces of a split fill one gradient: no summing pass, and the gradient of every use") {
  // (2, 6) split into three (2, 2) pieces, weighted 1, 2, 3: the engine adds the later pieces
  // into the first one's gradient, so nothing sums whole-input tensors. The split tensor is an
  // op's output, as qkv is (a leaf gets an accumulator per use, and no pending gradient).
  Tensor x0 = reshape(arange(12).to(DType::f32), {2, 6});
  x0.set_requires_grad(true);
  Tensor x = x0 * 1.0;
  auto p = split(x, int64_t(2), 1);
  const std::vector<std::string> ops = backward_ops(sum(p[0]) + sum(p[1] * 2.0) + sum(p[2] * 3.0));
  CHECK(x0.grad().to_vector<float>() == std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  CHECK(std::count(ops.begin(), ops.end(), std::string("accumulate_grad")) == 0);
  CHECK(std::count(ops.begin(), ops.end(), std::string("SliceBackward")) == 3);

  // Overlapping slices add where they overlap; a piece no loss reaches leaves zeros.
  Tensor y0 = reshape(arange(8).to(DType::f32), {1, 8});
  y0.set_requires_grad(true);
  Tensor y = y0 * 1.0;
  (sum(slice(y, 1, 0, 5)) + sum(slice(y, 1, 3, 7) * 10.0)).backward();
  CHECK(y0.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 11, 11, 10, 10, 0});
  Tensor z0 = reshape(arange(6).to(DType::f32), {3, 2});
  z0.set_requires_grad(true);
  auto q = split(z0 * 1.0, int64_t(1), 0);
  (sum(q[0]) + sum(q[2] * 4.0)).backward();  // q[1] unused
  CHECK(z0.grad().to_vector<float>() == std::vector<float>{1, 1, 0, 0, 4, 4});

  // A tensor whose first gradient is shared is copied before anything is added to it: add's
  // backward hands the same tensor to both its inputs, and u must keep its own gradient.
  Tensor w0 = reshape(arange(4).to(DType::f32), {2, 2}), u0 = reshape(arange(4).to(DType::f32), {2, 2});
  w0.set_requires_grad(true);
  u0.set_requires_grad(true);
  Tensor w = w0 * 1.0, u = u0 * 1.0;
  // (The engine runs the last term's backward first: w + u hands its gradient on before the slices.)
  (sum(u * 3.0) + sum(slice(w, 1, 0, 1)) + sum(slice(w, 1, 1, 2) * 2.0) + sum((w + u) * 5.0)).backward();
  CHECK(w0.grad().to_vector<float>() == std::vector<float>{6, 7, 6, 7});
  CHECK(u0.grad().to_vector<float>() == std::vector<float>{8, 8, 8, 8});
}

TEST_CASE("gradients through splits and overlapping slices match finite differences") {
  Generator gen(4);
  Tensor x = leaf({2, 3, 6}, gen);
  CHECK(gradcheck(
      [](const std::vector<Tensor>& v) {
        auto p = split(v[0], int64_t(2), 2);
        return concat({p[2] * p[0], p[1] * 3.0, slice(v[0], 2, 1, 5)}, 2);  // p[0] twice, an overlap
      },
      {x}));
}
