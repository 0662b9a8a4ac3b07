// Helpers of tests/ops/test_ops_cuda.cpp: a CUDA op against the CPU op on the same rounded
// inputs, with poisoned outputs and per-dtype relative tolerances (design.md section 6).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/random.h"

namespace keel::cudatest {

inline const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
inline const Device kGpu = Device::cuda(0);

inline double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

// ||out - ref|| / ||ref||; infinity when out holds a NaN or inf (a poisoned element).
inline double rel_err(const Tensor& out, const Tensor& ref) {
  std::vector<double> o = out.to_vector<double>(), r = ref.to_vector<double>();
  REQUIRE(o.size() == r.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (!std::isfinite(o[i])) return std::numeric_limits<double>::infinity();
    num += (o[i] - r[i]) * (o[i] - r[i]);
    den += r[i] * r[i];
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

#define CHECK_CLOSE(out, ref, dt)                     \
  do {                                                \
    REQUIRE((out).defined());                         \
    CHECK((out).shape() == (ref).shape());            \
    double err_ = rel_err((out), (ref));              \
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
// input through y.backward(R) with one random R on both sides.
inline void compare(const Fn& f, const std::vector<Tensor>& host_inputs, DType dt, bool backward = true) {
  std::vector<Tensor> dev, ref;
  for (const Tensor& h : host_inputs) {
    Pair p = make(h, dt, backward);
    dev.push_back(p.dev), ref.push_back(p.ref);
  }
  Tensor y_ref = f(ref);
  poison({bytes_of(y_ref.shape(), dt)});
  Tensor y = f(dev);
  REQUIRE(y.device() == kGpu);
  CHECK(y.dtype() == dt);
  CHECK_CLOSE(y, y_ref, dt);
  if (!backward) return;
  Generator gen(99);
  Pair r = make(randn(y_ref.shape(), gen), dt, false);
  y_ref.backward(r.ref);
  std::vector<int64_t> sizes;
  for (const Tensor& t : dev) sizes.push_back(bytes_of(t.shape(), dt));
  poison(sizes);
  y.backward(r.dev);
  for (size_t i = 0; i < dev.size(); ++i) {
    if (!is_floating(host_inputs[i].dtype())) continue;
    CAPTURE(i);
    REQUIRE(ref[i].grad().defined());
    CHECK_CLOSE(dev[i].grad(), ref[i].grad(), dt);
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
