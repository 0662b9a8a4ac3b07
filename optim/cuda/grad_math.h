// Device halves of optim/grad_math.h: a deterministic f64 sum of squares and an in-place
// scale, for contiguous floating tensors on one CUDA device. Plain C++ interface.
#pragma once

#include "core/tensor.h"

namespace keel::optim::cuda {

// t (N) f32 | f64 | bf16 | f16 -> sum of t^2 accumulated in f64, in a fixed order (a fixed
// grid and a one-block final pass, no atomics), so the same input gives the same bits.
double sum_of_squares(const Tensor& t);
// t (N) <- t * s, computed in f32 (f64 for f64 tensors).
void scale_inplace(Tensor& t, double s);

}  // namespace keel::optim::cuda
