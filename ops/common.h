// What every op front end shares: argument checks that produce the typed errors of
// core/error.h with the op's name and the shapes involved, and dtype dispatch for CPU kernels.
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

// For the CUDA branch of ops whose kernel has not been written yet.
[[noreturn]] void no_cuda_kernel(const char* op);

// Calls f.template operator()<T>() with T = float or double; CPU kernels compute in these.
// Half types on the CPU are refused: convert with .to(DType::f32).
template <typename F>
decltype(auto) dispatch_float(const char* op, DType t, F&& f) {
  if (t == DType::f32) return f.template operator()<float>();
  if (t == DType::f64) return f.template operator()<double>();
  throw DTypeError(op, std::string("CPU kernels compute in f32 or f64, got ") + dtype_name(t),
                   "convert with .to(DType::f32) on the CPU (bf16/f16 compute is for CUDA)");
}

// Same for index tensors: T = int32_t or int64_t.
template <typename F>
decltype(auto) dispatch_index(const char* op, DType t, F&& f) {
  if (t == DType::i32) return f.template operator()<int32_t>();
  if (t == DType::i64) return f.template operator()<int64_t>();
  throw DTypeError(op, std::string("indices must be i32 or i64, got ") + dtype_name(t));
}

}  // namespace keel::detail
