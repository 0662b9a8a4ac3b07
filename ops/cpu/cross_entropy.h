// The CPU kernels of cross-entropy fused with log-softmax (ops/cross_entropy.h). ops/cuda/cross_entropy.h declares the very
// same functions for the other device; the front end ops/cross_entropy.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include "core/tensor.h"

namespace keel::cpu {

// logits (N, Vp), targets (N) i32/i64, contiguous; the first V >= 1 of each row's Vp >= V
// columns are the classes, the rest padding (a vocabulary padded for the GPU's matmuls) that no
// softmax sees -> loss [] (f32; f64 for f64 logits); lse (N) and count [] i64 (the non-ignored
// rows, on the logits' device) are filled in. A target outside [0, V) that is not ignore_index
// raises IndexError: on the CPU here, on CUDA at the host's next synchronisation (the kernel
// checks; core/cuda/device_check.h), so the loss never waits for the device.
// dlogits not null: the caller promises that the loss's gradient will be `grad`, and *dlogits
// gets the backward's result for it now, in the same pass over the logits as the loss (the
// logits are read once instead of twice; the backward checks the promise).
// z_loss: each counted row's loss gains z_loss * lse^2 (ops/cross_entropy.h), and its gradient
// factor softmax * (1 + 2 z_loss lse). log_z not null: *log_z = (2) [mean lse, max |lse|] over the
// counted rows (0, 0 when none; NaN wins the max), in lse's dtype, on the logits' device.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t V, int64_t ignore_index, Tensor& lse,
                             Tensor& count, Tensor* dlogits = nullptr, float grad = 1.0f, double z_loss = 0,
                             Tensor* log_z = nullptr);
// logits (N, Vp), targets (N), lse (N), grad [] (the loss's gradient, on the logits' device)
// -> dlogits (N, Vp) = (softmax * (1 + 2 z_loss lse) - onehot(target)) * grad / count over the V classes, zero in
// the padding columns and in rows where ignored. `ready` (if defined): the forward's dlogits for
// a gradient of `expected`; returned as it is when grad == expected, else overwritten with the
// result for grad (on CUDA the device compares, so the host never waits).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t V,
                              int64_t ignore_index, const Tensor& count, const Tensor& grad, const Tensor& ready = {},
                              float expected = 1.0f, double z_loss = 0);

}  // namespace keel::cpu
