// The CUDA kernels of the gradient passes of clipping and loss scaling (optim/grad_math.h). optim/cpu/grad_math.h declares the
// very same functions for the other device; optim/grad_math.cpp picks one by the tensors' device.
// Plain C++ (no CUDA headers); a build without CUDA links optim/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace keel::optim::cuda {

// t (N) f32 | f64 | bf16 | f16 contiguous -> sum of t^2 accumulated in f64, in a fixed order
// whatever the thread or block count, so the same input gives the same bits.
double sum_of_squares(const Tensor& t);
// ts: K tensors (each N_k) f32 | f64 | bf16 | f16, contiguous, non-empty, on out's device; out (S)
// f64 contiguous -> out[slot] = ((0 + sum_of_squares(ts[0])) + sum_of_squares(ts[1])) + ..., the
// same bits, without waiting for the device: 2 launches per 48 tensors and 1 more.
void sum_of_squares_into(const std::vector<Tensor>& ts, Tensor& out, int64_t slot);
// t (N) contiguous <- t * s, computed in f32 (f64 for f64 tensors) and rounded to t's dtype.
void scale_inplace(Tensor& t, double s);
// ts: K tensors (each N_k) f32 | f64 | bf16 | f16, contiguous, on one device <- t * s, the bits
// of scale_inplace on each, in 1 launch per 48 tensors.
void scale_inplace_multi(const std::vector<Tensor>& ts, double s);
// The same with s = 1 / divisor[0], read on the device (divisor: f64, on the tensors' GPU): the
// bits of scale_inplace_multi(ts, 1.0 / d) for the value d it holds.
void unscale_inplace_multi(const std::vector<Tensor>& ts, const Tensor& divisor);

}  // namespace keel::optim::cuda
