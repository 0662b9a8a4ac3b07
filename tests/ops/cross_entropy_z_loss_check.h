// What the z-loss and log Z tests share (test_cross_entropy.cpp on the CPU,
// test_cross_entropy_cuda.cpp on the GPU): cross_entropy with a z-loss, its gradient and its log Z
// statistics against a reference computed here in f64 from the same rounded logits.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/random.h"
#include "ops/arith.h"
#include "ops/cross_entropy.h"

namespace keel::z_loss_test {

// The f64 reference of cross_entropy with a z-loss z over the first V of Vp columns, for a loss
// gradient g: the loss, the logits' gradient (N, Vp), and log Z's mean and largest |.| over the
// rows whose target is not ignored.
struct Reference {
  double loss = 0, mean_log_z = 0, max_abs_log_z = 0;
  std::vector<double> grad;
};

// x (N, Vp) row-major, t (N) -> the reference, every sum in f64 by its definition.
inline Reference reference(const std::vector<double>& x, int64_t Vp, int64_t V, const std::vector<int64_t>& t,
                           double z, double g) {
  const int64_t N = static_cast<int64_t>(t.size());
  Reference r;
  r.grad.assign(x.size(), 0.0);
  std::vector<double> lse(t.size());
  int64_t n = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == kIgnoreIndex) continue;
    const double* row = x.data() + i * Vp;
    const double m = *std::max_element(row, row + V);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(row[j] - m);
    lse[i] = m + std::log(s);
    r.loss += lse[i] - row[t[i]] + z * lse[i] * lse[i];
    r.mean_log_z += lse[i];
    r.max_abs_log_z = std::max(r.max_abs_log_z, std::abs(lse[i]));
    ++n;
  }
  if (n == 0) return r;
  r.loss /= double(n);
  r.mean_log_z /= double(n);
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == kIgnoreIndex) continue;
    for (int64_t j = 0; j < V; ++j) {
      // d/dx_j of lse - x_t + z lse^2 = softmax_j (1 + 2 z lse) - [j = t]
      const double p = std::exp(x[i * Vp + j] - lse[i]);
      r.grad[i * Vp + j] = (p * (1 + 2 * z * lse[i]) - (j == t[i] ? 1.0 : 0.0)) * g / double(n);
    }
  }
  return r;
}

// max over rows of ||a_row - b_row|| / ||b_row|| (rows of b all non-zero here).
inline double worst_row_error(const std::vector<double>& a, const std::vector<double>& b, int64_t cols) {
  double worst = 0;
  for (size_t r = 0; r * size_t(cols) < b.size(); ++r) {
    double num = 0, den = 0;
    for (size_t j = r * size_t(cols); j < (r + 1) * size_t(cols); ++j)
      num += (a[j] - b[j]) * (a[j] - b[j]), den += b[j] * b[j];
    worst = std::max(worst, den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  }
  return worst;
}

// On `dev` in dtype `dt`: 37 rows of 1024 columns of which 1001 are classes, two rows ignored,
// the logits shifted so that log Z sits near +17 and near -2 (a z-loss of 1e-2 then moves the
// loss by about 3 and scales the softmax's gradient by 1.3 to 1.0). For each promise (none, the
// gradient the loss gets) the loss, the logits' gradient and log Z match the f64 reference of the
// same rounded logits: to 1e-12 in f64, 1e-5 in f32 (the loss and log Z are f32 for every storage
// type), and the gradient to 1e-2 in bf16/f16 (rounded to them).
inline void check_z_loss(Device dev, DType dt) {
  CAPTURE(std::string(dtype_name(dt)));
  const int64_t N = 37, Vp = 1024, V = 1001;
  const double z = 1e-2, g = 0.5;
  std::vector<int64_t> t(N);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t((i * 53 + 7) % V);
  t[3] = t[20] = kIgnoreIndex;
  const Tensor targets = from_vector(t, {N}).to(dev);
  const double tol = dt == DType::f64 ? 1e-12 : 1e-5, grad_tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 1e-2;
  for (double shift : {8.0, -11.0}) {
    CAPTURE(shift);
    Generator gen(6);
    const Tensor base = add(randn({N, Vp}, gen, {DType::f64}, 0.0, 2.0), shift).to(dt).to(dev);
    const Reference ref = reference(base.to(Device::cpu()).to_vector<double>(), Vp, V, t, z, g);
    for (std::optional<double> promise : {std::optional<double>(), std::optional<double>(g)}) {
      CAPTURE(promise.has_value());
      Tensor logits = base.clone().set_requires_grad(true), log_z;
      Tensor loss = cross_entropy(logits, targets, kIgnoreIndex, V, promise, z, &log_z);
      mul(loss, g).backward();
      CHECK(loss.item() == doctest::Approx(ref.loss).epsilon(tol));
      REQUIRE(log_z.shape() == Shape{2});
      CHECK(log_z.device() == dev);
      const std::vector<double> lz = log_z.to(Device::cpu()).to_vector<double>();
      CHECK(lz[0] == doctest::Approx(ref.mean_log_z).epsilon(tol));
      CHECK(lz[1] == doctest::Approx(ref.max_abs_log_z).epsilon(tol));
      const std::vector<double> grad = logits.grad().to(Device::cpu()).to_vector<double>();
      const double err = worst_row_error(grad, ref.grad, Vp);
      CAPTURE(err);
      CHECK(err < grad_tol);
    }
    // The z-loss moved what it should: the loss by z * mean(lse^2) against the plain loss.
    const double plain = cross_entropy(base, targets, kIgnoreIndex, V).item();
    CHECK(std::abs(ref.loss - plain) > 0.5 * z * ref.mean_log_z * ref.mean_log_z);
  }
}

// log Z's statistics on `dev`: a NaN logit in a row that counts makes the largest |log Z| NaN,
// one in an ignored row changes nothing; with every row ignored both are 0.
inline void check_log_z_edges(Device dev) {
  std::vector<float> x(4 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) * 0.5f - 1.0f;
  const Tensor clean = from_vector(x, {4, 5});
  x[2 * 5 + 3] = std::nanf("");
  const Tensor poisoned = from_vector(x, {4, 5});
  auto stats = [&](const Tensor& logits, std::vector<int64_t> t) {
    Tensor log_z;
    cross_entropy(logits.to(dev), from_vector(t, {4}).to(dev), kIgnoreIndex, 0, std::nullopt, 0.0, &log_z);
    return log_z.to(Device::cpu()).to_vector<double>();
  };
  const std::vector<double> ok = stats(clean, {0, 1, kIgnoreIndex, 3});
  CHECK(stats(poisoned, {0, 1, kIgnoreIndex, 3}) == ok);
  CHECK(std::isnan(stats(poisoned, {0, 1, 2, 3})[1]));
  CHECK(stats(clean, {kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex}) == std::vector<double>{0.0, 0.0});
  CHECK(ok[0] != 0.0);
}

}  // namespace keel::z_loss_test
