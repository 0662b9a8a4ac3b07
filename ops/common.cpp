#include "ops/common.h"

#include <algorithm>
#include <cmath>

namespace keel::detail {

std::string describe(const char* name, const Tensor& t) {
  if (!t.defined()) return std::string(name) + " (undefined)";
  return std::string(name) + " " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " " + t.device().str();
}

namespace {
std::string list(const std::vector<Arg>& args) {
  std::string s;
  for (const auto& [name, t] : args) {
    if (!s.empty()) s += ", ";
    s += describe(name, t);
  }
  return s;
}
}  // namespace

void check_defined(const char* op, const std::vector<Arg>& args) {
  for (const auto& [name, t] : args)
    if (!t.defined()) throw ValueError(op, std::string("argument ") + name + " is an undefined tensor");
}

void check_same_device(const char* op, const std::vector<Arg>& args) {
  check_defined(op, args);
  Device d = args.begin()->second.device();
  for (const auto& a : args)
    if (a.second.device() != d)
      throw DeviceError(op, "arguments are on different devices: " + list(args),
                        "move them to one device with .to(Device)");
}

void check_same_dtype(const char* op, const std::vector<Arg>& args) {
  check_defined(op, args);
  DType d = args.begin()->second.dtype();
  for (const auto& a : args)
    if (a.second.dtype() != d)
      throw DTypeError(op, "arguments have different dtypes: " + list(args), "convert them with .to(DType)");
}

void check_floating(const char* op, const std::vector<Arg>& args) {
  check_defined(op, args);
  for (const auto& [name, t] : args)
    if (!is_floating(t.dtype()))
      throw DTypeError(op, std::string("expected a floating tensor: ") + describe(name, t),
                       "convert with .to(DType::f32)");
}

void check_integer(const char* op, const std::vector<Arg>& args) {
  check_defined(op, args);
  for (const auto& [name, t] : args)
    if (t.dtype() != DType::i32 && t.dtype() != DType::i64)
      throw DTypeError(op, std::string("expected an i32 or i64 index tensor: ") + describe(name, t),
                       "convert with .to(DType::i64)");
}

void check_floating_operands(const char* op, const std::vector<Arg>& required, const std::vector<Arg>& optional) {
  std::vector<Arg> all = required;
  for (const Arg& a : optional)
    if (a.second.defined()) all.push_back(a);
  check_same_device(op, all);
  check_floating(op, all);
  check_same_dtype(op, all);
}

void check_dim(const char* op, const Arg& arg, int64_t ndim) {
  if (arg.second.dim() != ndim)
    throw ShapeError(op, std::string("expected ") + arg.first + " to have " + std::to_string(ndim) +
                             " dimensions: " + describe(arg.first, arg.second));
}

void check_min_dim(const char* op, const Arg& arg, int64_t min_ndim) {
  if (arg.second.dim() < min_ndim)
    throw ShapeError(op, std::string("expected ") + arg.first + " to have at least " + std::to_string(min_ndim) +
                             " dimensions: " + describe(arg.first, arg.second));
}

void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating_operands(op, {{"x", x}, {"weight", weight}}, {{"bias", bias}});
  check_min_dim(op, {"x", x}, 1);
  check_dim(op, {"weight", weight}, 2);
  if (x.size(-1) != weight.size(1))
    throw ShapeError(op, "in-features differ: " + describe("x", x) + ", " + describe("weight", weight),
                     "weight is (out_features, in_features) as in PyTorch; x's last dim must be in_features");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    throw ShapeError(op, "bias does not match the out-features: " + describe("bias", bias) + ", " +
                             describe("weight", weight),
                     "bias must be (out_features)");
}

void check_layernorm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_floating_operands(op, {{"x", x}, {"weight", weight}}, {{"bias", bias}});
  check_min_dim(op, {"x", x}, 1);
  int64_t C = x.size(-1);
  if (weight.dim() != 1 || weight.size(0) != C)
    throw ShapeError(op, "weight must be (C) for x (..., C): " + describe("x", x) + ", " + describe("weight", weight));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != C))
    throw ShapeError(op, "bias must be (C) for x (..., C): " + describe("x", x) + ", " + describe("bias", bias));
  if (!(eps >= 0) || !std::isfinite(eps))
    throw ValueError(op, "eps must be a finite number >= 0, got " + std::to_string(eps));
}

// t (..., C) -> (N, C)
Tensor rows_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  int64_t C = t.dim() > 0 ? t.size(-1) : 1;
  return c.as_strided({C > 0 ? c.numel() / C : 0, C}, {C, 1}, c.offset());
}

}  // namespace keel::detail

namespace keel {

Shape matmul_batch_shape(const Tensor& a, const Tensor& b, const char* op) {
  int64_t na = a.dim() - 2, nb = b.dim() - 2, n = std::max(na, nb);
  Shape batch(n);
  for (int64_t d = 0; d < n; ++d) {
    int64_t sa = d - (n - na) >= 0 ? a.shape()[d - (n - na)] : 1;
    int64_t sb = d - (n - nb) >= 0 ? b.shape()[d - (n - nb)] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw ShapeError(op, "batch dimensions do not broadcast: " + detail::describe("a", a) + ", " +
                               detail::describe("b", b),
                       "the dims before the last two must be equal or 1 (or b a plain matrix)");
    batch[d] = sa == 1 ? sb : sa;
  }
  return batch;
}

}  // namespace keel
