// The two elementwise passes over gradients that clipping and loss scaling need, for any
// floating dtype on any device. Kept apart from clip/loss_scaler so that the CPU and CUDA
// dispatch is written once.
#pragma once

#include "core/tensor.h"

namespace keel::optim {

// t (any shape) -> sum of t^2 in f64 accumulation. Deterministic: fixed chunks summed in a
// fixed order, whatever the thread count. inf or NaN when some element is not finite.
double sum_of_squares(const Tensor& t);

// t (any shape) <- t * s in place, computed in f32 (f64 for f64 tensors) and rounded to t's dtype.
void scale_(Tensor& t, double s);

}  // namespace keel::optim
