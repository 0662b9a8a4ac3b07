// Tensor: a cheap, shared handle to a strided view of a Storage, plus autograd fields.
//
// Copying a Tensor copies the handle, not the data (like torch.Tensor). Several tensors can
// view one Storage with different shape/strides/offset: that is how reshape, transpose and
// slice cost nothing. Strides and offset count elements, not bytes.
//
// Core provides only data movement and metadata here; the differentiable operations
// (matmul, reshape, ...) live in ops/ as free functions: keel::matmul(a, b).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace keel {

using Shape = std::vector<int64_t>;

class Node;  // core/autograd.h

struct TensorImpl {
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  std::shared_ptr<Storage> storage;

  // Autograd. A leaf that requires grad accumulates into `grad`; a non-leaf has a grad_fn
  // (the node that made it) and gets no .grad of its own.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  // Where a leaf's next gradient goes while `grad` is empty (Tensor::set_grad_buffer): memory
  // kept from one step to the next, possibly of a wider dtype than the leaf.
  std::shared_ptr<TensorImpl> grad_buffer;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // --- metadata ---
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t offset() const { return checked().offset; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const { return checked().dtype; }
  Device device() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }

  // --- data access (CPU tensors; typed access checks the dtype) ---
  void* raw_data() const;  // pointer to the first element (storage base + offset)
  template <typename T> T* data() const {
    check_dtype(dtype_of<T>, "data");
    return static_cast<T*>(raw_data());
  }
  // The single value of a one-element tensor, as double, from any device.
  double item() const;
  // All values in logical (row-major) order, converted to T, from any device.
  template <typename T> std::vector<T> to_vector() const;

  // --- data movement (differentiable: gradients flow back through them) ---
  Tensor contiguous() const;  // self when already contiguous, else a packed copy
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor clone() const;  // always a fresh copy

  // A view on the same storage (not differentiable; ops/ builds differentiable views on it).
  Tensor as_strided(Shape shape, Shape strides, int64_t offset) const;

  // --- autograd ---
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& set_requires_grad(bool r);  // only on leaves
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return checked().grad_fn; }
  Tensor grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient (the next backward starts from zero)
  // Makes `buffer` (this leaf's shape, contiguous, floating, on its device; any floating dtype,
  // e.g. f32 for a bf16 leaf) the memory of its gradient from now on: after zero_grad() the
  // next backward's first gradient is written into it, converted, and becomes grad(); later
  // ones add to it. grad() stays undefined until then, as without a buffer, but no step
  // allocates a gradient or fills one with zeros. An undefined buffer removes it.
  void set_grad_buffer(const Tensor& buffer);
  Tensor detach() const;  // same data, no history
  // Reverse-mode autodiff from this tensor. `grad` defaults to 1 for a one-element tensor;
  // a non-scalar needs an explicit gradient. The graph is freed unless retain_graph.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;

  std::string str() const;  // "tensor([...], dtype=f32)" as a student would want to read it

 private:
  TensorImpl& checked() const;
  void check_dtype(DType want, const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- small shape helpers used across the code base ---
int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1, range checked

}  // namespace keel
