// CPU kernels for elementwise arithmetic. Computation in the tensor's own type (f32/f64).
#include <cmath>

#include "ops/cpu/arith.h"

#include "core/factory.h"
#include "ops/cpu/elementwise.h"

namespace keel::cpu {

Shape broadcast_strides(const Tensor& t, const Shape& out) {
  Shape s(out.size(), 0);
  int64_t lead = static_cast<int64_t>(out.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) s[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return s;
}

// a, b broadcastable to out (S), any strides; out (S) contiguous.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_dtype<CpuFloat>(out.dtype(), "binary", [&]<typename T>() {
    const T* pa = static_cast<const T*>(a.storage()->data());
    const T* pb = static_cast<const T*>(b.storage()->data());
    T* po = out.data<T>();
    Shape sa = broadcast_strides(a, out.shape()), sb = broadcast_strides(b, out.shape());
    auto run = [&](auto fn) {
      for_each_pair(out.shape(), sa, a.offset(), sb, b.offset(),
                    [&](int64_t i, int64_t ia, int64_t ib) { po[i] = fn(pa[ia], pb[ib]); });
    };
    switch (op) {
      case BinaryOp::add: return run([](T x, T y) { return x + y; });
      case BinaryOp::sub: return run([](T x, T y) { return x - y; });
      case BinaryOp::mul: return run([](T x, T y) { return x * y; });
      case BinaryOp::div: return run([](T x, T y) { return x / y; });
    }
  });
}

// x (S) -> out (S), out contiguous.
void unary(UnaryOp op, const Tensor& x, Tensor& out, double s) {
  visit_dtype<CpuFloat>(out.dtype(), "unary", [&]<typename T>() {
    const T* px = static_cast<const T*>(x.storage()->data());
    T* po = out.data<T>();
    const T c = static_cast<T>(s);
    Shape zero(x.dim(), 0);
    auto run = [&](auto fn) {
      for_each_pair(x.shape(), x.strides(), x.offset(), zero, 0,
                    [&](int64_t i, int64_t ix, int64_t) { po[i] = fn(px[ix]); });
    };
    switch (op) {
      case UnaryOp::neg: return run([](T v) { return -v; });
      case UnaryOp::exp: return run([](T v) { return std::exp(v); });
      case UnaryOp::log: return run([](T v) { return std::log(v); });
      case UnaryOp::tanh: return run([](T v) { return std::tanh(v); });
      case UnaryOp::relu: return run([](T v) { return v > T(0) ? v : T(0); });
      case UnaryOp::square: return run([](T v) { return v * v; });
      case UnaryOp::add_scalar: return run([c](T v) { return v + c; });
      case UnaryOp::mul_scalar: return run([c](T v) { return v * c; });
    }
  });
}

// g, x (S) any strides -> (S) contiguous = g * (x > 0). A product, not a select, so a NaN
// gradient stays NaN where x <= 0, as on CUDA.
Tensor relu_backward(const Tensor& g, const Tensor& x) {
  Tensor gc = g.detach().contiguous(), xc = x.detach().contiguous();
  Tensor out = empty(x.shape(), {g.dtype()});
  visit_dtype<CpuFloat>(out.dtype(), "relu backward", [&]<typename T>() {
    const T *pg = gc.data<T>(), *px = xc.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = pg[i] * (px[i] > T(0) ? T(1) : T(0));
  });
  return out;
}

}  // namespace keel::cpu
