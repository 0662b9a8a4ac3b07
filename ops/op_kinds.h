// The names of the elementwise operations and reductions, shared by the op front ends
// (ops/arith.h, ops/reduce.h) and the kernels of both devices (ops/cpu, ops/cuda), so that a
// kernel header needs no front-end header for a type.
#pragma once

namespace keel {

enum class BinaryOp { add, sub, mul, div };
enum class UnaryOp { neg, exp, log, tanh, relu, square, add_scalar, mul_scalar };
enum class Reduce { sum, max };

}  // namespace keel
