// Cross-entropy loss fused with log-softmax: the mean over rows of -log softmax(logits)[target].
//
// Forward keeps only the per-row logsumexp; backward rebuilds softmax from the logits and it
// (softmax - onehot), so no (N, V) probability tensor is stored between the two passes.
#pragma once

#include "core/tensor.h"

namespace keel {

// logits (..., V) floating, targets (...) i32/i64 with values in [0, V) or == ignore_index
// -> [] = mean over the non-ignored rows of logsumexp(row) - row[target].
// The loss is f32 whatever the logits' dtype (f64 for f64 logits): a bf16 loss is quantized
// to ~0.016 near 3, and an f16 one overflows once the loss scaler multiplies it by 2^16. The
// per-row logsumexp and the mean are computed in f32 (f64 on the CPU) as well. On the CPU,
// bf16/f16 logits are widened to f32 (the CPU kernels compute in f32) and the gradient is
// rounded back to the logits' dtype.
// Rows whose target is ignore_index contribute nothing and get a zero gradient. When every
// target is ignored the loss is 0 with a zero gradient (PyTorch gives NaN): a batch made only
// of padding then leaves the model unchanged instead of turning its weights into NaN.
// A target outside [0, V) that is not ignore_index raises IndexError.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// CPU kernels (no autograd, no argument checks; contiguous CPU tensors; logits f32 or f64).
namespace cpu {
// logits (N, V), targets (N) -> loss [] (logits' dtype: f32 or f64); lse (N) and the number of
// non-ignored rows `count` are filled in. Raises IndexError for an out-of-range target.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& lse,
                             int64_t& count);
// logits (N, V), targets (N), lse (N), grad (the loss's gradient) -> dlogits (N, V) =
// (softmax - onehot(target)) * grad / count, zero on ignored rows.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              int64_t count, double grad);
}  // namespace cpu

}  // namespace keel
