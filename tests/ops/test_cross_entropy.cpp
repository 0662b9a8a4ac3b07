// cross_entropy (fused with log-softmax): forward against a naive reference, ignore_index,
// backward against finite differences, and bad targets.
#include <doctest/doctest.h>

#include <cmath>

#include "cross_entropy_fused_check.h"
#include "cross_entropy_z_loss_check.h"
#include "gradcheck.h"
#include "ops/cross_entropy.h"
#include "ops/shape.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

namespace {
// logits (N, V) values, targets (N) -> mean over non-ignored rows of lse - logit[target].
double naive_cross_entropy(const Tensor& logits, const std::vector<int64_t>& t, int64_t ignore) {
  std::vector<double> v = logits.to_vector<double>();
  int64_t V = logits.size(-1);
  double total = 0;
  int64_t n = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) continue;
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(v[r * V + j]);
    total += std::log(z) - v[r * V + t[r]];
    ++n;
  }
  return total / n;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("cross_entropy forward matches a naive reference") {
  Generator gen(1);
  Tensor logits = randn({2, 3, 7}, gen, {DType::f64}, 0.0, 2.0);
  std::vector<int64_t> t = {0, 6, 3, 1, 2, 5};
  double ref = naive_cross_entropy(logits, t, kIgnoreIndex);
  Tensor loss = cross_entropy(logits, from_vector(t, {2, 3}));
  CHECK(loss.shape() == Shape{});
  CHECK(loss.item() == doctest::Approx(ref).epsilon(1e-14));
  // i32 targets; f32 logits against the f64 result.
  std::vector<int32_t> t32(t.begin(), t.end());
  CHECK(cross_entropy(logits.to(DType::f32), from_vector(t32, {2, 3})).item() == doctest::Approx(ref).epsilon(1e-6));
  // Uniform logits over V classes give log V.
  CHECK(cross_entropy(zeros({3, 5}), from_vector<int64_t>({0, 1, 4}, {3})).item() ==
        doctest::Approx(std::log(5.0)));
  // Huge logits stay finite (the max is subtracted).
  Tensor big = from_vector<float>({1000.0f, 0.0f, 999.0f, 1000.0f}, {2, 2});
  CHECK(cross_entropy(big, from_vector<int64_t>({0, 0}, {2})).item() ==
        doctest::Approx((std::log1p(std::exp(-1000.0)) + std::log1p(std::exp(-1.0)) + 1.0) / 2));
}

TEST_CASE("cross_entropy f32 on a large batch (threaded) agrees with f64") {
  Generator gen(2);
  Tensor logits = randn({64, 1000}, gen, {DType::f64}, 0.0, 3.0);
  std::vector<int64_t> t(64);
  for (int64_t i = 0; i < 64; ++i) t[i] = (i * 37) % 1000;
  Tensor targets = from_vector(t, {64});
  double ref = naive_cross_entropy(logits, t, kIgnoreIndex);
  CHECK(cross_entropy(logits, targets).item() == doctest::Approx(ref).epsilon(1e-13));
  CHECK(cross_entropy(logits.to(DType::f32), targets).item() == doctest::Approx(ref).epsilon(1e-6));
}

TEST_CASE("cross_entropy ignore_index: the mean is over the kept rows, ignored rows get no gradient") {
  Generator gen(3);
  Tensor logits = leaf({5, 4}, gen);
  std::vector<int64_t> t = {1, kIgnoreIndex, 3, kIgnoreIndex, 0};  // the default ignore_index
  Tensor loss = cross_entropy(logits, from_vector(t, {5}));
  CHECK(loss.item() == doctest::Approx(naive_cross_entropy(logits, t, kIgnoreIndex)).epsilon(1e-14));
  loss.backward();
  std::vector<double> g = logits.grad().to_vector<double>();
  for (int64_t j = 0; j < 4; ++j) {
    CHECK(g[1 * 4 + j] == 0.0);
    CHECK(g[3 * 4 + j] == 0.0);
  }
  // A kept row's gradient is (softmax - onehot) / 3 and sums to zero.
  double row0 = g[0] + g[1] + g[2] + g[3];
  CHECK(row0 == doctest::Approx(0.0).epsilon(1e-15));
  CHECK(g[1] < 0);
  // A custom ignore_index, and one equal to a valid class.
  CHECK(cross_entropy(logits, from_vector<int64_t>({1, 7, 3, 7, 0}, {5}), 7).item() == doctest::Approx(loss.item()));
  CHECK(cross_entropy(logits, from_vector<int64_t>({1, 2, 3, 2, 0}, {5}), 2).item() == doctest::Approx(loss.item()));

  // Every target ignored: loss 0 and zero gradient (a documented choice; PyTorch gives NaN).
  Tensor l2 = leaf({2, 3}, gen);
  Tensor none = cross_entropy(l2, from_vector<int64_t>({kIgnoreIndex, kIgnoreIndex}, {2}));
  CHECK(none.item() == 0.0);
  none.backward();
  for (double v : l2.grad().to_vector<double>()) CHECK(v == 0.0);
}

TEST_CASE("cross_entropy backward matches finite differences") {
  // Tolerances: the gradcheck defaults (atol 1e-7, rtol 1e-5); the loss is smooth in logits.
  Generator gen(4);
  struct Case {
    Shape shape;
    std::vector<int64_t> targets;
  };
  for (const Case& c : {Case{{3, 5}, {0, 4, 2}}, Case{{2, 2, 3}, {2, kIgnoreIndex, 0, 1}}, Case{{1, 1}, {0}},
                        Case{{4, 7}, {6, 6, kIgnoreIndex, 3}}}) {
    CAPTURE(shape_str(c.shape));
    Shape ts(c.shape.begin(), c.shape.end() - 1);
    Tensor targets = from_vector(c.targets, ts);
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); },
                    {leaf(c.shape, gen, 2.0)}));
  }
  // The loss scaled downstream: the incoming gradient multiplies through.
  Tensor logits = leaf({2, 3}, gen);
  Tensor targets = from_vector<int32_t>({2, 0}, {2});
  cross_entropy(logits, targets).backward(full({}, 3.0, {DType::f64}));
  std::vector<double> g3 = logits.grad().to_vector<double>();
  logits.zero_grad();
  cross_entropy(logits, targets).backward();
  std::vector<double> g1 = logits.grad().to_vector<double>();
  for (size_t i = 0; i < g1.size(); ++i) CHECK(g3[i] == doctest::Approx(3 * g1[i]));
}

TEST_CASE("cross_entropy rejects bad inputs") {
  Tensor logits = zeros({2, 4});
  std::string m = message_of([&] { cross_entropy(logits, from_vector<int64_t>({1, 4}, {2})); });
  CHECK(m.find("IndexError") != std::string::npos);
  CHECK(m.find("cross_entropy") != std::string::npos);
  CHECK(m.find("target 4") != std::string::npos);
  CHECK(m.find("V = 4") != std::string::npos);
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<int32_t>({-1, 0}, {2})), IndexError);
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<int64_t>({0, 1, 2}, {3})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<int64_t>({0, 1}, {1, 2})), ShapeError);
  CHECK(message_of([&] { cross_entropy(logits, zeros({3}, {DType::i64})); }).find("cross_entropy") !=
        std::string::npos);
  CHECK_THROWS_AS(cross_entropy(logits, zeros({2})), DTypeError);  // float targets
  CHECK_THROWS_AS(cross_entropy(zeros({2, 4}, {DType::i64}), zeros({2}, {DType::i64})), DTypeError);
  // (bf16/f16 logits are accepted on the CPU: widened to f32, see the mixed-precision case.)
  CHECK_THROWS_AS(cross_entropy(logits, empty({0}, {DType::i64, Device::cuda(0)})), DeviceError);
  CHECK_THROWS_AS(cross_entropy(logits, Tensor()), ValueError);
  // No classes (V = 0): refused even when every target is ignored, and when there are no rows.
  std::string v0 = message_of([&] { cross_entropy(zeros({3, 0}), full({3}, -100.0, {DType::i64})); });
  CHECK(v0.find("ShapeError") != std::string::npos);
  CHECK(v0.find("empty class dimension") != std::string::npos);
  CHECK_THROWS_AS(cross_entropy(zeros({2, 0}), from_vector<int64_t>({0, 1}, {2})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(zeros({0, 0}), zeros({0}, {DType::i64})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(zeros({0}, {DType::f64}), zeros({}, {DType::i32})), ShapeError);
  // No rows but some classes is a mean over nothing: 0, as when every row is ignored.
  CHECK(cross_entropy(zeros({0, 5}), zeros({0}, {DType::i64})).item() == 0.0);
}

TEST_CASE("cross_entropy of bf16/f16 logits: the loss is f32, the gradient has the logits' dtype") {
  // A loss near 3 in bf16 is quantized to 1/64; the f32 loss must equal the f64 reference fed
  // the same rounded logits (to f32 rounding), and the backward must still give bf16/f16.
  Generator gen(7);
  Tensor wide = randn({16, 37}, gen, {DType::f32}, 0.0, 1.5);
  std::vector<int64_t> t(16);
  for (size_t r = 0; r < t.size(); ++r) t[r] = static_cast<int64_t>((r * 5) % 37);
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor x = wide.to(dt).set_requires_grad(true);
    Tensor loss = cross_entropy(x, from_vector(t, {16}));
    CHECK(loss.dtype() == DType::f32);
    const double ref = naive_cross_entropy(x.to(DType::f64), t, kIgnoreIndex);
    CHECK(loss.item() == doctest::Approx(ref).epsilon(1e-6));
    loss.backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == dt);
    // The f32 gradient of the same rounded logits, rounded to dt, is what the backward gives.
    Tensor x32 = x.detach().to(DType::f32).set_requires_grad(true);
    cross_entropy(x32, from_vector(t, {16})).backward();
    CHECK(x.grad().to_vector<float>() == x32.grad().to(dt).to_vector<float>());
  }
  // f64 logits keep an f64 loss (finite-difference checks need it).
  CHECK(cross_entropy(wide.to(DType::f64), from_vector(t, {16})).dtype() == DType::f64);
}

TEST_CASE("cross_entropy over the first `classes` columns: padding is never a class and gets no gradient") {
  // (4, 7) logits of which 5 are classes: the loss and the real columns' gradient are those of
  // the (4, 5) logits alone, whatever the padding holds (here large values that would dominate).
  Tensor full = from_vector<double>({0.1, -0.3, 0.7, 0.2, -1.0, 9.0, 9.0,   //
                                     0.5, 0.4, -0.2, 0.0, 0.3, -9.0, 9.0,   //
                                     -0.6, 0.2, 0.1, 0.9, -0.4, 9.0, -9.0,  //
                                     0.3, 0.3, 0.3, 0.3, 0.3, 0.0, 0.0},
                                    {4, 7})
                     .set_requires_grad(true);
  Tensor real = narrow(full.detach(), 1, 0, 5).contiguous().set_requires_grad(true);
  const Tensor targets = from_vector<int64_t>({1, 4, kIgnoreIndex, 0}, {4});
  Tensor padded_loss = cross_entropy(full, targets, kIgnoreIndex, 5);
  Tensor loss = cross_entropy(real, targets);
  CHECK(padded_loss.item() == loss.item());
  CHECK(loss.item() == doctest::Approx(naive_cross_entropy(real, {1, 4, kIgnoreIndex, 0}, kIgnoreIndex)));
  padded_loss.backward();
  loss.backward();
  const std::vector<double> g = full.grad().to_vector<double>(), want = real.grad().to_vector<double>();
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t j = 0; j < 5; ++j) CHECK(g[r * 7 + j] == want[r * 5 + j]);
    CHECK(g[r * 7 + 5] == 0.0);
    CHECK(g[r * 7 + 6] == 0.0);
  }
  // A target in the padding is out of range; classes must fit the last dim.
  CHECK_THROWS_AS(cross_entropy(full, from_vector<int64_t>({5, 0, 0, 0}, {4}), kIgnoreIndex, 5), IndexError);
  CHECK_THROWS_AS(cross_entropy(full, targets, kIgnoreIndex, 8), ValueError);
  CHECK_THROWS_AS(cross_entropy(full, targets, kIgnoreIndex, -1), ValueError);
}

TEST_CASE("cross_entropy with expected_grad: the forward computes the gradient, the same bits") {
  for (DType dt : {DType::f32, DType::f64}) cross_entropy_test::check_fused(Device::cpu(), dt);
  // With a z-loss: the forward writes its gradient too, the same bits as the backward's.
  for (DType dt : {DType::f32, DType::f64}) cross_entropy_test::check_fused(Device::cpu(), dt, 1e-3);
}

TEST_CASE("cross_entropy z-loss: loss, gradient and log Z against an f64 reference, every dtype") {
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) z_loss_test::check_z_loss(Device::cpu(), dt);
  z_loss_test::check_log_z_edges(Device::cpu());
}

TEST_CASE("cross_entropy z-loss backward matches finite differences") {
  // The z-loss's gradient, 2 z lse softmax, checked without the formula the kernels use.
  Generator gen(8);
  for (double z : {1e-3, 0.2}) {
    CAPTURE(z);
    Tensor targets = from_vector<int64_t>({2, kIgnoreIndex, 0, 4}, {4});
    CHECK(gradcheck([&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0], targets, kIgnoreIndex, 0, std::nullopt, z);
    }, {leaf({4, 5}, gen, 3.0)}));
    // And over the first 5 of 7 columns, the padding with no gradient.
    CHECK(gradcheck([&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0], targets, kIgnoreIndex, 5, std::nullopt, z);
    }, {leaf({4, 7}, gen, 3.0)}));
  }
}

TEST_CASE("cross_entropy z-loss: 0 is the loss without it, a negative or non-finite coefficient is refused") {
  Generator gen(9);
  Tensor logits = leaf({6, 11}, gen, 2.0);
  Tensor targets = from_vector<int64_t>({1, 0, 10, kIgnoreIndex, 3, 3}, {6});
  Tensor log_z;
  CHECK(cross_entropy(logits, targets, kIgnoreIndex, 0, std::nullopt, 0.0, &log_z).item() ==
        cross_entropy(logits, targets).item());
  CHECK(log_z.dtype() == DType::f64);  // the lse's dtype: f64 logits on the CPU
  CHECK_THROWS_AS(cross_entropy(logits, targets, kIgnoreIndex, 0, std::nullopt, -1e-4), ValueError);
  CHECK_THROWS_AS(cross_entropy(logits, targets, kIgnoreIndex, 0, std::nullopt, std::nan("")), ValueError);
  CHECK_THROWS_AS(cross_entropy(logits, targets, kIgnoreIndex, 0, std::nullopt, INFINITY), ValueError);
}
