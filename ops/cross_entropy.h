// Cross-entropy loss fused with log-softmax: the mean over rows of -log softmax(logits)[target].
//
// Forward keeps only the per-row logsumexp; backward rebuilds softmax from the logits and it
// (softmax - onehot), so no (N, V) probability tensor is stored between the two passes.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace keel {

// The target that marks a row to skip (padding): Hugging Face's and PyTorch's default, so token
// files and labels prepared for those tools mean the same here.
inline constexpr int64_t kIgnoreIndex = -100;

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
// A target outside [0, V) that is not ignore_index raises IndexError; V = 0 raises ShapeError.
//
// classes > 0: only the first `classes` columns of the last dim are classes (V = classes); the
// rest is padding, which the softmax never sees and whose gradient is 0. A vocabulary padded to
// a multiple of 128 keeps the output layer's matmuls on cuBLAS's aligned kernels (nn/gpt2.cpp);
// the loss and every real column's gradient are what the unpadded logits give.
//
// expected_grad: the gradient the loss will get in backward, when the caller knows it (1 for
// loss.backward(); a trainer's 1 / grad_accum times its loss scale). The forward then computes
// the logits' gradient as well, in the same pass over the logits as the loss: on a GPU the
// logits leave DRAM once instead of twice (the "fused classifier"). The backward checks the
// promise (on the device: no synchronisation) and recomputes where it was wrong, so the result
// is the same bits either way; a wrong promise only costs the wasted write. Without it (or when
// no gradient is needed) nothing changes.
//
// z_loss > 0: the z-loss of PaLM and of Wortsman et al. 2023 ("Small-scale proxies for
// large-scale Transformer training instabilities", arXiv 2309.14322). Each counted row adds
// z_loss * lse(row)^2 to its loss, so the loss is the mean of lse - row[target] + z_loss * lse^2
// and a row's gradient is softmax * (1 + 2 z_loss lse) - onehot(target). lse is log Z, the log
// of the softmax's partition function; the term pulls it towards 0, which keeps the output
// logits from drifting (a drift the softmax itself cannot see). The kernels compute it from the
// lse they already have, in the same passes; z_loss = 0 gives the very bits of the loss without it.
// z_loss < 0 or not finite raises ValueError.
//
// log_z not null: *log_z = (2) [mean log Z, max |log Z|] over the counted rows (0 and 0 when no
// row counts; a NaN lse makes the max NaN), without gradient, on the logits' device, f32 (f64 for
// f64 logits on the CPU): the statistics of the output softmax that the trainer logs beside the
// attention's, made by the loss's own kernels from its lse (on CUDA by the kernel that already
// averages the rows' losses), so they cost no pass over the logits and no synchronisation.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = kIgnoreIndex,
                     int64_t classes = 0, std::optional<double> expected_grad = std::nullopt, double z_loss = 0,
                     Tensor* log_z = nullptr);

}  // namespace keel
