// The few device kernels core itself needs (copies between layouts and dtypes, fill, and
// the gradient accumulation of the autograd engine). Plain C++ interface; the kernels are in
// kernels.cu. All tensors must be on the same CUDA device.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// dst (any) <- src (dst's shape), any strides (up to 8 dims for a non-contiguous side),
// converting between any two dtypes as the CPU copy does: integer to integer directly (i64
// exact, narrowing keeps the low bits), anything else through double (half types via float).
// Matching dtypes and contiguous layouts copy bytes.
void copy_strided(Tensor& dst, const Tensor& src);
// dst += src, same shape: one floating dtype and any strides (dst a window of a larger tensor,
// say), or a contiguous bf16/f16 src into a contiguous f32 dst (widened as it is read, as
// converting it first would: the gradient buffers of half parameters).
void add_inplace(Tensor& dst, const Tensor& src);
// Every element of contiguous t set to value.
void fill(Tensor& t, double value);

}  // namespace keel::cuda
