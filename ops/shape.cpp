// Shape operations. Views are built with Tensor::as_strided; their backward nodes map the
// gradient back to the input's shape (reshape it, permute it back, or place it in zeros).
#include "ops/shape.h"

#include <algorithm>

#include "core/copy.h"
#include "ops/arith.h"
#include "ops/common.h"

namespace keel {

namespace {
Shape infer_shape(const char* op, const Tensor& x, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw ShapeError(op, "only one dimension can be -1 in " + shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw ShapeError(op, "negative dimension in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      throw ShapeError(op, "cannot infer -1 in " + shape_str(shape) + " for " + detail::describe("x", x));
    shape[infer] = x.numel() / known;
  }
  if (numel_of(shape) != x.numel())
    throw ShapeError(op, "shape " + shape_str(shape) + " has " + std::to_string(numel_of(shape)) +
                             " elements but " + detail::describe("x", x) + " has " + std::to_string(x.numel()),
                     "the number of elements must stay the same");
  return shape;
}

struct ReshapeBackward : Node {
  Shape in_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {reshape(g, in_shape)}; }
};

struct PermuteBackward : Node {
  std::vector<int64_t> inverse;
  const char* name() const override { return "PermuteBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {permute(g, inverse)}; }
};

// g (the slice's shape) -> a gradient of the input's shape, zero outside the slice's window.
// When the input's gradient is already pending (another piece of a split delivered it), the
// engine has add_into add g into its window instead: the pieces of one split share one gradient.
struct SliceBackward : Node {
  Shape in_shape;
  int64_t dim, start, step;
  const char* name() const override { return "SliceBackward"; }
  Tensor window_of(Tensor& t, const Tensor& g) const {
    return slice(t, dim, start, start + step * (g.size(dim) - 1) + 1, step);
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = zeros(in_shape, {g.dtype(), g.device()});
    Tensor window = window_of(gx, g);
    copy_(window, g);
    return {gx};
  }
  bool fresh_gradients() const override { return true; }
  bool add_into(const Tensor& g, Tensor& into) override {
    if (into.shape() != in_shape || into.dtype() != g.dtype()) return false;
    Tensor window = window_of(into, g);
    accumulate_into(window, g);  // window += g in place, one pass (a split's windows do not overlap)
    return true;
  }
  profiler::Cost cost(const Tensor& g) const override {  // the zeros, then the window's copy
    profiler::Cost c;
    c.bytes = double(numel_of(in_shape) * dtype_size(g.dtype()) + 2 * g.numel() * dtype_size(g.dtype()));
    c.shape = shape_str(g.shape());
    return c;
  }
  profiler::Cost add_into_cost(const Tensor& g) const override {  // the window and g read, the window written
    profiler::Cost c;
    c.flops = double(g.numel());
    c.bytes = double(3 * g.numel() * dtype_size(g.dtype()));
    c.shape = shape_str(g.shape());
    return c;
  }
};

struct ConcatBackward : Node {
  std::vector<int64_t> sizes;
  int64_t dim;
  const char* name() const override { return "ConcatBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    std::vector<Tensor> gs;
    int64_t at = 0;
    for (int64_t s : sizes) {
      gs.push_back(narrow(g, dim, at, s));
      at += s;
    }
    return gs;
  }
};

Tensor with_reshape_history(Tensor out, const Tensor& x) {
  if (needs_grad({x})) {
    auto n = std::make_shared<ReshapeBackward>();
    n->in_shape = x.shape();
    connect(out, n, {x});
  }
  return out;
}
}  // namespace

Tensor view(const Tensor& x, Shape shape) {
  detail::check_defined("view", {{"x", x}});
  shape = infer_shape("view", x, std::move(shape));
  if (!x.is_contiguous())
    throw ShapeError("view", "cannot view a non-contiguous tensor " + detail::describe("x", x) + " as " +
                                 shape_str(shape),
                     "use reshape(), which copies when it must");
  return with_reshape_history(x.detach().as_strided(shape, contiguous_strides(shape), x.offset()), x);
}

Tensor reshape(const Tensor& x, Shape shape) {
  detail::check_defined("reshape", {{"x", x}});
  shape = infer_shape("reshape", x, std::move(shape));
  // contiguous() records its own (identity) node when it copies; the view goes on top of it.
  return view(x.contiguous(), shape);
}

Tensor flatten(const Tensor& x) { return reshape(x, {-1}); }

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", {{"x", x}});
  if (static_cast<int64_t>(dims.size()) != x.dim())
    throw ShapeError("permute", std::to_string(dims.size()) + " dims given for " + detail::describe("x", x));
  Shape shape(dims.size()), strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], x.dim(), "permute");
    if (inverse[d] != -1) throw IndexError("permute", "dimension " + std::to_string(d) + " appears twice");
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  Tensor out = x.detach().as_strided(shape, strides, x.offset());
  if (needs_grad({x})) {
    auto n = std::make_shared<PermuteBackward>();
    n->inverse = inverse;
    connect(out, n, {x});
  }
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  detail::check_defined("transpose", {{"x", x}});
  std::vector<int64_t> dims(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) dims[i] = i;
  std::swap(dims[normalize_dim(dim0, x.dim(), "transpose")], dims[normalize_dim(dim1, x.dim(), "transpose")]);
  return permute(x, dims);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined("unsqueeze", {{"x", x}});
  int64_t d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  Shape strides = x.strides();
  strides.insert(strides.begin() + d, d < x.dim() ? x.strides()[d] * x.shape()[d] : 1);
  return with_reshape_history(x.detach().as_strided(shape, strides, x.offset()), x);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined("squeeze", {{"x", x}});
  int64_t d = normalize_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1)
    throw ShapeError("squeeze", "dimension " + std::to_string(dim) + " of " + detail::describe("x", x) +
                                    " has size " + std::to_string(x.shape()[d]) + ", not 1");
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return with_reshape_history(x.detach().as_strided(shape, strides, x.offset()), x);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", {{"x", x}});
  int64_t d = normalize_dim(dim, x.dim(), "slice");
  if (step <= 0) throw ValueError("slice", "step must be positive, got " + std::to_string(step));
  int64_t n = x.shape()[d];
  auto clamp = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t(0), n); };
  start = clamp(start), end = clamp(end);
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  Shape shape = x.shape(), strides = x.strides();
  shape[d] = len;
  strides[d] *= step;
  Tensor out = x.detach().as_strided(shape, strides, x.offset() + start * x.strides()[d]);
  if (needs_grad({x})) {
    auto node = std::make_shared<SliceBackward>();
    node->in_shape = x.shape(), node->dim = d, node->start = start, node->step = step;
    connect(out, node, {x});
  }
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", {{"x", x}});
  int64_t d = normalize_dim(dim, x.dim(), "narrow");
  if (start < 0 || length < 0 || start + length > x.shape()[d])
    throw IndexError("narrow", "range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                                   ") is outside dimension " + std::to_string(dim) + " of " + detail::describe("x", x));
  return slice(x, d, start, start + length);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) throw ValueError("concat", "needs at least one tensor");
  const Tensor& first = xs[0];
  detail::check_defined("concat", {{"xs[0]", first}});
  int64_t d = normalize_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    std::string name = "xs[" + std::to_string(i) + "]";
    detail::check_same_device("concat", {{"xs[0]", first}, {name.c_str(), t}});
    detail::check_same_dtype("concat", {{"xs[0]", first}, {name.c_str(), t}});
    Shape a = t.shape(), b = first.shape();
    if (a.size() == b.size()) a[d] = b[d] = 0;
    if (a != b)
      throw ShapeError("concat", detail::describe(name.c_str(), t) + " does not match " +
                                     detail::describe("xs[0]", first) + " outside dimension " + std::to_string(dim));
    sizes.push_back(t.shape()[d]);
    total += t.shape()[d];
  }
  shape[d] = total;
  Tensor out = empty(shape, {first.dtype(), first.device()});
  int64_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor window = slice(out, d, at, at + sizes[i]);
    copy_(window, xs[i]);
    at += sizes[i];
  }
  if (needs_grad(xs)) {
    auto n = std::make_shared<ConcatBackward>();
    n->sizes = sizes, n->dim = d;
    connect(out, n, xs);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined("split", {{"x", x}});
  int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ValueError("split", "negative piece size " + std::to_string(s));
    total += s;
  }
  if (total != x.shape()[d])
    throw ShapeError("split", "piece sizes add up to " + std::to_string(total) + " but dimension " +
                                  std::to_string(dim) + " of " + detail::describe("x", x) + " is " +
                                  std::to_string(x.shape()[d]));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  detail::check_defined("split", {{"x", x}});
  if (size <= 0) throw ValueError("split", "piece size must be positive, got " + std::to_string(size));
  int64_t n = x.shape()[normalize_dim(dim, x.dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  return split(x, sizes, dim);
}

}  // namespace keel
