// Making tensors: empty/zeros/ones/full, from host values, ranges, and random fills.
#pragma once

#include <optional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace keel {

// Where and how to make a tensor. An unset dtype means f32, except in from_vector, where it
// means the element type of the values given.
struct Options {
  std::optional<DType> dtype;
  Device device = Device::cpu();
  bool requires_grad = false;
};

Tensor empty(const Shape& shape, Options opt = {});
Tensor zeros(const Shape& shape, Options opt = {});
Tensor ones(const Shape& shape, Options opt = {});
Tensor full(const Shape& shape, double value, Options opt = {});
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);  // same shape, dtype, device; contiguous; uninitialised
Tensor scalar(double value, Options opt = {});  // shape []

// Host values in row-major order, converted to opt.dtype (default: T's own dtype).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Options opt = {});

Tensor arange(int64_t n, Options opt = {});  // 0, 1, ..., n-1; i64 unless opt.dtype says otherwise

// Random fills from a Philox generator (advances it). Same seed -> same values on any device.
Tensor randn(const Shape& shape, Generator& gen, Options opt = {}, double mean = 0.0, double std = 1.0);
Tensor rand(const Shape& shape, Generator& gen, Options opt = {}, double low = 0.0, double high = 1.0);
// In place on an existing tensor (initialisers use these): values are written in logical order.
void normal_(Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);
void uniform_(Tensor& t, Generator& gen, double low = 0.0, double high = 1.0);

// Writes `value` into every element of t (any layout, any device).
void fill_(Tensor& t, double value);

}  // namespace keel
