#include "core/tensor.h"

#include "core/autograd.h"
#include "core/copy.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"

namespace keel {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    throw IndexError(op, "dimension " + std::to_string(dim) + " is out of range for a tensor of " +
                             std::to_string(ndim) + " dimensions",
                     "use a dimension in [-ndim, ndim)");
  return d;
}

TensorImpl& Tensor::checked() const {
  if (!impl_)
    throw ValueError("Tensor", "this tensor is undefined (default-constructed or moved from)",
                     "create it with keel::empty/zeros/from_vector or an op first");
  return *impl_;
}

void Tensor::check_dtype(DType want, const char* what) const {
  if (dtype() != want)
    throw DTypeError(what, std::string("tensor has dtype ") + dtype_name(dtype()) + ", asked for " +
                               dtype_name(want),
                     "convert with .to(DType)");
}

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::numel() const { return numel_of(shape()); }
Device Tensor::device() const { return checked().storage ? checked().storage->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] != 1 && strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  auto& s = checked().storage;
  if (!s || !s->data()) return nullptr;
  return static_cast<char*>(s->data()) + offset() * static_cast<int64_t>(dtype_size(dtype()));
}

double Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("item", "item() needs exactly one element, tensor has shape " + shape_str(shape()),
                     "reduce first, e.g. with keel::sum");
  return to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = device().is_cpu() ? *this : detach().to(Device::cpu());
  Tensor packed = empty(shape(), {dtype_of<T>, Device::cpu()});
  copy_(packed, host);
  const T* p = packed.data<T>();
  return std::vector<T>(p, p + packed.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

namespace {
// contiguous() and clone() pass the gradient through unchanged.
struct IdentityBackward : Node {
  const char* label;
  explicit IdentityBackward(const char* l) : label(l) {}
  const char* name() const override { return label; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }
};
struct ToDeviceBackward : Node {
  Device source;
  explicit ToDeviceBackward(Device d) : source(d) {}
  const char* name() const override { return "ToDeviceBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g.to(source)}; }
};
struct ToDTypeBackward : Node {
  DType source;
  explicit ToDTypeBackward(DType d) : source(d) {}
  const char* name() const override { return "ToDTypeBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g.to(source)}; }
};

Tensor copy_to(const Tensor& src, DType dtype, Device device) {
  Tensor out = empty(src.shape(), {dtype, device});
  copy_(out, src);
  return out;
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = copy_to(*this, dtype(), device());
  if (needs_grad({*this})) connect(out, std::make_shared<IdentityBackward>("ContiguousBackward"), {*this});
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = copy_to(*this, dtype(), device());
  if (needs_grad({*this})) connect(out, std::make_shared<IdentityBackward>("CloneBackward"), {*this});
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (d.is_cuda()) cuda::check_device(d.index, "to");
  Tensor out = copy_to(*this, dtype(), d);
  if (needs_grad({*this})) connect(out, std::make_shared<ToDeviceBackward>(device()), {*this});
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = copy_to(*this, t, device());
  // Gradients only make sense between floating types; a cast to an integer type ends the graph.
  if (is_floating(t) && is_floating(dtype()) && needs_grad({*this}))
    connect(out, std::make_shared<ToDTypeBackward>(dtype()), {*this});
  return out;
}

Tensor Tensor::as_strided(Shape shape, Shape strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype();
  impl->storage = storage();
  return Tensor(impl);
}

Tensor& Tensor::set_requires_grad(bool r) {
  if (!is_leaf())
    throw AutogradError("set_requires_grad", "only leaf tensors can change requires_grad",
                        "call .detach() first to get a leaf");
  if (r && !is_floating(dtype()))
    throw DTypeError("set_requires_grad", std::string("only floating tensors can require grad, this one is ") +
                                              dtype_name(dtype()));
  checked().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked().grad); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && g.shape() != shape())
    throw ShapeError("set_grad", "gradient shape " + shape_str(g.shape()) + " differs from tensor shape " +
                                     shape_str(shape()));
  checked().grad = g.impl_ptr();
}

void Tensor::zero_grad() { checked().grad.reset(); }

void Tensor::set_grad_buffer(const Tensor& buffer) {
  if (buffer.defined()) {
    if (buffer.shape() != shape())
      throw ShapeError("set_grad_buffer", "buffer shape " + shape_str(buffer.shape()) + " differs from tensor shape " +
                                              shape_str(shape()));
    if (!is_floating(buffer.dtype()) || !buffer.is_contiguous() || buffer.device() != device())
      throw ValueError("set_grad_buffer", "the buffer must be a contiguous floating tensor on " + device().str() +
                                              ", got " + dtype_name(buffer.dtype()) + " on " + buffer.device().str());
  }
  checked().grad_buffer = buffer.impl_ptr();
}

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward(*this, grad, retain_graph); }

}  // namespace keel
