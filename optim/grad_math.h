// The two elementwise passes over gradients that clipping and loss scaling need, for any
// floating dtype on any device. Kept apart from clip/loss_scaler so that the CPU and CUDA
// dispatch is written once.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace keel::optim {

// t (any shape) -> sum of t^2 in f64 accumulation. Deterministic: fixed chunks summed in a
// fixed order, whatever the thread count. inf or NaN when some element is not finite.
double sum_of_squares(const Tensor& t);

// ts (each any shape, floating; undefined ones skipped), all on out's device; out (S) f64
// contiguous -> out[slot] = the f64 sum over ts, in list order from 0, of sum_of_squares(t):
// the very bits of that loop on the host, which bit-exact resume and world-size independence
// rest on. On CUDA it issues a few launches for any K and does not wait for the device, so a
// caller can read the result back with other values in one copy.
void sum_of_squares_into(const std::vector<Tensor>& ts, Tensor& out, int64_t slot);

// t (any shape) <- t * s in place, computed in f32 (f64 for f64 tensors) and rounded to t's dtype.
void scale_(Tensor& t, double s);

// ts (each any shape, floating; undefined ones skipped) <- t * s in place, the bits of scale_ on
// each. Contiguous CUDA tensors on one device go in 1 launch per 48 tensors rather than 1 each,
// which matters when a small step is bound by the host's launches.
void scale_all_(const std::vector<Tensor>& ts, double s);

}  // namespace keel::optim
