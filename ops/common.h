// What every op front end shares: argument checks that produce the typed errors of
// core/error.h with the op's name and the shapes involved. (Kernels dispatch on the dtype with
// core/dtype.h's visit_dtype.)
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/tensor.h"

namespace keel::detail {

// A named argument, for messages: {"q", q}.
using Arg = std::pair<const char*, Tensor>;

// "q [2, 4, 8, 16] f32 cpu"
std::string describe(const char* name, const Tensor& t);

// Each raises the matching typed error naming `op` and the arguments.
void check_defined(const char* op, const std::vector<Arg>& args);
void check_same_device(const char* op, const std::vector<Arg>& args);
void check_same_dtype(const char* op, const std::vector<Arg>& args);
void check_floating(const char* op, const std::vector<Arg>& args);
void check_integer(const char* op, const std::vector<Arg>& args);
// The usual trio for an op's floating operands: one device, floating, one dtype, across every
// `required` argument and each `optional` one that is defined (a bias that may be absent).
void check_floating_operands(const char* op, const std::vector<Arg>& required, const std::vector<Arg>& optional = {});
void check_dim(const char* op, const Arg& arg, int64_t ndim);           // exactly ndim dims
void check_min_dim(const char* op, const Arg& arg, int64_t min_ndim);   // at least min_ndim
// A fully connected layer's operands (linear, linear_gelu): x (..., K), weight (N, K) as in
// PyTorch's nn.Linear, bias (N) or undefined.
void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);
// A LayerNorm's operands (layernorm, add_layernorm): x (..., C), weight (C), bias (C) or
// undefined, eps finite and >= 0.
void check_layernorm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// t (..., C) -> (N, C): a packed, detached copy unless t already is contiguous (the row-wise
// kernels' layout).
Tensor rows_of(const Tensor& t);

}  // namespace keel::detail

namespace keel {

// Shape rules the front ends and the kernels of both devices share.
// a (..., M, K), b (..., K, N) -> the batch shape (...) they broadcast to; ShapeError naming
// `op` if none.
Shape matmul_batch_shape(const Tensor& a, const Tensor& b, const char* op);

}  // namespace keel
