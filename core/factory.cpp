#include "core/factory.h"

#include "core/copy.h"
#include "core/cuda/kernels.h"

namespace keel {

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape)
    if (s < 0) throw ShapeError(op, "negative dimension in shape " + shape_str(shape));
}
}  // namespace

Tensor empty(const Shape& shape, Options opt) {
  check_shape(shape, "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opt.dtype.value_or(DType::f32);
  impl->storage = std::make_shared<Storage>(numel_of(shape) * dtype_size(impl->dtype), opt.device);
  Tensor t(impl);
  if (opt.requires_grad) t.set_requires_grad(true);
  return t;
}

void fill_(Tensor& t, double value) {
  if (t.numel() == 0) return;
  if (t.device().is_cuda()) {
    if (!t.is_contiguous()) throw ValueError("fill_", "CUDA fill needs a contiguous tensor");
    return cuda::fill(t, value);
  }
  visit_dtype(t.dtype(), [&]<typename T>() {
    T v = static_cast<T>(value);
    T* base = static_cast<T*>(t.storage()->data());
    for_each_offset(t.shape(), t.strides(), t.offset(), [&](int64_t, int64_t off) { base[off] = v; });
  });
}

Tensor full(const Shape& shape, double value, Options opt) {
  bool rg = opt.requires_grad;
  opt.requires_grad = false;
  Tensor t = empty(shape, opt);
  fill_(t, value);
  if (rg) t.set_requires_grad(true);
  return t;
}
Tensor zeros(const Shape& shape, Options opt) { return full(shape, 0.0, opt); }
Tensor ones(const Shape& shape, Options opt) { return full(shape, 1.0, opt); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {t.dtype(), t.device()}); }
Tensor scalar(double value, Options opt) { return full({}, value, opt); }

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Options opt) {
  if (static_cast<int64_t>(values.size()) != numel_of(shape))
    throw ShapeError("from_vector", std::to_string(values.size()) + " values do not fill shape " + shape_str(shape),
                     "give exactly as many values as the shape has elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype_of<T>;
  impl->storage = std::make_shared<Storage>(values.size() * sizeof(T), Device::cpu());
  if (!values.empty()) std::copy(values.begin(), values.end(), static_cast<T*>(impl->storage->data()));
  Tensor host(impl);
  Tensor out = host;
  DType want = opt.dtype.value_or(dtype_of<T>);
  if (want != host.dtype() || !opt.device.is_cpu()) {
    out = empty(shape, {want, opt.device});
    copy_(out, host);
  }
  if (opt.requires_grad) out.set_requires_grad(true);
  return out;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Options);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Options);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Options);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Options);

Tensor arange(int64_t n, Options opt) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  opt.dtype = opt.dtype.value_or(DType::i64);  // indices by default, as in PyTorch
  return from_vector(v, {n}, opt);
}

namespace {
// Random values are drawn on the host in logical order, then copied: one code path, and the
// numbers do not depend on the device or on the tensor's layout.
template <typename Draw>
void random_fill(Tensor& t, Draw draw) {
  int64_t n = t.numel();
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = draw(static_cast<uint64_t>(i));
  Tensor host = from_vector(v, t.shape());
  copy_(t, host);
}
}  // namespace

void normal_(Tensor& t, Generator& gen, double mean, double std) {
  uint64_t key = gen.seed(), base = gen.advance(t.numel());
  random_fill(t, [&](uint64_t i) { return mean + std * philox_normal(key, base, i); });
}

void uniform_(Tensor& t, Generator& gen, double low, double high) {
  uint64_t key = gen.seed(), base = gen.advance(t.numel());
  random_fill(t, [&](uint64_t i) { return low + (high - low) * philox_uniform(key, base, i); });
}

Tensor randn(const Shape& shape, Generator& gen, Options opt, double mean, double std) {
  Tensor t = empty(shape, {opt.dtype, opt.device});
  normal_(t, gen, mean, std);
  if (opt.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor rand(const Shape& shape, Generator& gen, Options opt, double low, double high) {
  Tensor t = empty(shape, {opt.dtype, opt.device});
  uniform_(t, gen, low, high);
  if (opt.requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace keel
