// Printing tensors the way PyTorch does, so that students can compare side by side:
//   tensor([[ 0.1000, -2.0000],
//           [ 3.0000,  4.5000]], dtype=f32, grad_fn=MatmulBackward)
// Large tensors show their first and last 3 entries per dimension.
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/tensor.h"

namespace keel {

namespace {
constexpr int64_t kEdge = 3;
constexpr int64_t kSummarizeAbove = 1000;

void print_rec(std::ostringstream& os, const std::vector<double>& v, const Shape& shape,
               const Shape& strides, size_t d, int64_t off, bool summarize, bool integral, int indent) {
  if (d == shape.size()) {
    if (integral)
      os << static_cast<int64_t>(v[off]);
    else
      os << std::setw(8) << std::fixed << std::setprecision(4) << v[off];
    return;
  }
  os << "[";
  int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + d + 1, ' '));
      i = n - kEdge;
    }
    print_rec(os, v, shape, strides, d + 1, off + i * strides[d], summarize, integral, indent);
    if (i + 1 < n) os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + d + 1, ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  std::vector<double> v = to_vector<double>();
  bool integral = !is_floating(dtype());
  print_rec(os, v, shape(), contiguous_strides(shape()), 0, 0, numel() > kSummarizeAbove, integral, 7);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (grad_fn())
    os << ", grad_fn=" << grad_fn()->name();
  else if (requires_grad())
    os << ", requires_grad=true";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace keel
