// CPU kernels for elementwise arithmetic. Computation in the tensor's own type (f32/f64).
#include <cmath>

#include "ops/common.h"
#include "ops/cpu/elementwise.h"

namespace keel::cpu {

Shape broadcast_strides(const Tensor& t, const Shape& out) {
  Shape s(out.size(), 0);
  int64_t lead = static_cast<int64_t>(out.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) s[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return s;
}

// a, b: broadcastable to out.shape(); out: contiguous.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  detail::dispatch_float("binary", out.dtype(), [&]<typename T>() {
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
  detail::dispatch_float("unary", out.dtype(), [&]<typename T>() {
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

}  // namespace keel::cpu
