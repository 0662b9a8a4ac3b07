// Gradient checking against central finite differences, in f64 on the CPU.
//
// For y = f(inputs) we pick a fixed random projection R (same shape as y) and compare the
// analytic gradient of L = sum(y * R), obtained with y.backward(R), with
// (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input. A random R catches
// errors that a plain sum would cancel out.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"

namespace keel::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
  uint64_t seed = 1234;
};

inline double projected(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

// inputs: f64 CPU tensors; those with requires_grad are checked. Returns true when all match.
inline bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      GradcheckOptions opt = {}) {
  for (Tensor& t : inputs) REQUIRE(t.dtype() == DType::f64);
  Tensor y = f(inputs);
  Generator gen(opt.seed);
  Tensor r = randn(y.shape(), gen, {DType::f64});
  std::vector<double> rv = r.to_vector<double>();
  for (Tensor& t : inputs)
    if (t.requires_grad()) t.zero_grad();
  y.backward(r);

  bool ok = true;
  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    REQUIRE(x.is_contiguous());
    Tensor g = x.grad();
    std::vector<double> analytic = g.defined() ? g.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double saved = p[i];
      p[i] = saved + opt.eps;
      double plus = projected(f(inputs), rv);
      p[i] = saved - opt.eps;
      double minus = projected(f(inputs), rv);
      p[i] = saved;
      double numeric = (plus - minus) / (2 * opt.eps);
      if (!(std::abs(analytic[i] - numeric) <= opt.atol + opt.rtol * std::abs(numeric))) {
        if (ok)
          MESSAGE("input " << k << " element " << i << ": analytic " << analytic[i] << " vs numeric " << numeric);
        ok = false;
      }
    }
  }
  return ok;
}

// A random f64 leaf that requires grad, for gradient checks.
inline Tensor leaf(const Shape& shape, Generator& gen, double scale = 1.0) {
  Tensor t = randn(shape, gen, {DType::f64}, 0.0, scale);
  t.set_requires_grad(true);
  return t;
}

}  // namespace keel::testing
