// Helpers of tests/ops/test_ops_cuda.cpp: a CUDA op against the CPU op on the same rounded
// inputs, with poisoned outputs and per-dtype relative tolerances (design.md section 6).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/random.h"

namespace keel::cudatest {

inline const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
inline const Device kGpu = Device::cuda(0);

inline double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

// The worst row's relative error, rows being the last dim: max over rows r of
// ||out_r - ref_r|| / max(||ref_r||, floor), floor = 1e-3 x the RMS row norm (so a row of zeros
// in the reference, such as an ignored target's gradient, divides by something, yet a wrong
// value in it still shows). One norm over the whole tensor would let a wrong row hide among
// thousands of right ones. Infinity when out holds a NaN or inf (a poisoned, unwritten element).
// With `terms` (same shape as ref): a row is held relative to the larger of its own size and
// that of terms' row, for a result that is a sum whose terms cancel (see compare's by_terms).
inline double worst_row_rel_err(const Tensor& out, const Tensor& ref, const Tensor& terms = Tensor()) {
  std::vector<double> o = out.to_vector<double>(), r = ref.to_vector<double>();
  const std::vector<double> m = terms.defined() ? terms.to_vector<double>() : std::vector<double>();
  REQUIRE(o.size() == r.size());
  if (o.empty()) return 0.0;
  const size_t n = ref.dim() == 0 ? 1 : static_cast<size_t>(std::max<int64_t>(ref.size(-1), 1));
  const size_t rows = r.size() / n;
  double total = 0;
  for (double x : r) total += x * x;
  const double floor = std::max(1e-3 * std::sqrt(total / double(rows)), 1e-30);
  double worst = 0;
  for (size_t row = 0; row < rows; ++row) {
    double num = 0, den = 0, den_terms = 0;
    for (size_t i = row * n; i < (row + 1) * n; ++i) {
      if (!std::isfinite(o[i])) return std::numeric_limits<double>::infinity();
      num += (o[i] - r[i]) * (o[i] - r[i]);
      den += r[i] * r[i];
      if (!m.empty()) den_terms += m[i] * m[i];
    }
    worst = std::max(worst, std::sqrt(num) / std::max({std::sqrt(den), std::sqrt(den_terms), floor}));
  }
  return worst;
}

// Per-element relative error max |out - ref| / max(|ref|, 1), for statistics (log-sum-exp,
// max logit) that are O(1) or larger; infinity for a non-finite out where ref is finite.
inline double max_elem_rel_err(const Tensor& out, const Tensor& ref) {
  std::vector<double> o = out.to_vector<double>(), r = ref.to_vector<double>();
  REQUIRE(o.size() == r.size());
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(r[i]) && std::isnan(o[i])) continue;  // NaN where the reference has NaN
    if (!std::isfinite(o[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(o[i] - r[i]) / std::max(std::abs(r[i]), 1.0));
  }
  return worst;
}

#define CHECK_CLOSE(out, ref, dt)                     \
  do {                                                \
    REQUIRE((out).defined());                         \
    CHECK((out).shape() == (ref).shape());            \
    double err_ = worst_row_rel_err((out), (ref));    \
    CAPTURE(err_);                                    \
    CHECK(err_ < tolerance(dt));                      \
  } while (0)

// Fills the device allocator's cache with blocks of these byte sizes whose bytes are all 0xFF
// (NaN in f32, bf16 and f16; -1 in integers): the next allocations of those size classes get
// them back, so an element a kernel does not write stays NaN.
inline void poison(const std::vector<int64_t>& nbytes, int copies = 4) {
  std::vector<Tensor> hold;
  for (int64_t nb : nbytes)
    for (int k = 0; k < copies; ++k) hold.push_back(full({std::max<int64_t>((nb + 3) / 4, 1)}, -1.0, {DType::i32, kGpu}));
}
inline int64_t bytes_of(const Shape& s, DType t) { return numel_of(s) * static_cast<int64_t>(dtype_size(t)); }

// One input on both sides: dev in dtype dt on the GPU, ref the same (rounded) values in f32 on
// the CPU. Integer tensors (ids, targets) are copied unchanged and never require grad.
struct Pair {
  Tensor dev, ref;
};
inline Pair make(const Tensor& host, DType dt, bool requires_grad) {
  if (!is_floating(host.dtype())) return {host.to(kGpu), host};
  Tensor d = host.detach().to(kGpu).to(dt).detach();
  Tensor r = d.to(DType::f32).to(Device::cpu()).detach();
  if (requires_grad) d.set_requires_grad(true), r.set_requires_grad(true);
  return {d, r};
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on the device (dtype dt) against f on the CPU (f32), then the gradients of every floating
// input through y.backward(R) with one random R on both sides. out_dt: the dtype f's output
// must have on the device (dt unless given: cross_entropy's loss is f32 whatever dt); the
// output is held to out_dt's tolerance, the input gradients to dt's.
//
// by_terms, for f built of sums, differences, products and quotients (add, sub, mul, div):
// the gradient of a broadcast operand is a sum over the broadcast dims of terms that the
// device rounds to dt one by one (the product before the sum), and whose signs cancel. The
// bound any evaluation in dt meets is relative to the sum of the terms' sizes, which for such
// f is the same gradient taken at |inputs| with |R|; each gradient row is held relative to the
// larger of that and its own size. A wrong or missing term still moves a row by a whole term.
inline void compare(const Fn& f, const std::vector<Tensor>& host_inputs, DType dt, bool backward = true,
                    std::optional<DType> out_dt = std::nullopt, bool by_terms = false) {
  const DType odt = out_dt.value_or(dt);
  std::vector<Tensor> dev, ref;
  for (const Tensor& h : host_inputs) {
    Pair p = make(h, dt, backward);
    dev.push_back(p.dev), ref.push_back(p.ref);
  }
  Tensor y_ref = f(ref);
  poison({bytes_of(y_ref.shape(), odt)});
  Tensor y = f(dev);
  REQUIRE(y.device() == kGpu);
  CHECK(y.dtype() == odt);
  CHECK_CLOSE(y, y_ref, odt);
  if (!backward) return;
  Generator gen(99);
  Pair r = make(randn(y_ref.shape(), gen), odt, false);
  y_ref.backward(r.ref);
  std::vector<int64_t> sizes;
  for (const Tensor& t : dev) sizes.push_back(bytes_of(t.shape(), dt));
  poison(sizes);
  y.backward(r.dev);
  std::vector<Tensor> terms(dev.size());
  if (by_terms) {
    auto absolute = [](const Tensor& t) {
      std::vector<float> v = t.to_vector<float>();
      for (float& x : v) x = std::fabs(x);
      return from_vector<float>(v, t.shape()).detach();
    };
    std::vector<Tensor> abs_in;
    for (const Tensor& t : ref) abs_in.push_back(is_floating(t.dtype()) ? absolute(t).set_requires_grad(true) : t);
    f(abs_in).backward(absolute(r.ref));
    for (size_t i = 0; i < abs_in.size(); ++i)
      if (is_floating(abs_in[i].dtype())) terms[i] = abs_in[i].grad();
  }
  for (size_t i = 0; i < dev.size(); ++i) {
    if (!is_floating(host_inputs[i].dtype())) continue;
    CAPTURE(i);
    REQUIRE(ref[i].grad().defined());
    const double err_ = worst_row_rel_err(dev[i].grad(), ref[i].grad(), terms[i]);
    CAPTURE(err_);
    CHECK(err_ < tolerance(dt));
  }
}

inline Tensor rnd(const Shape& s, uint64_t seed, double mean = 0.0, double std = 1.0) {
  Generator g(seed);
  return randn(s, g, {}, mean, std);
}
inline Tensor uni(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return rand(s, g, {}, lo, hi);
}
inline Tensor ids_of(const Shape& s, int64_t V, uint64_t seed, DType t = DType::i64) {
  Generator g(seed);
  std::vector<int64_t> v(numel_of(s));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(philox_uniform(seed, 0, i) * V) % V;
  return from_vector<int64_t>(v, s, {t});
}

}  // namespace keel::cudatest
