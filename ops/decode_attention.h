// Attention of a few new queries over a KV cache: the decode step of generation.
//
// q (B, H, t, D) are the queries of positions [position, position + t). k and v (B, H, S, D) are
// a cache of S slots per head: the key and value of position j sit in slot j % S. A global head's
// cache has at least position + t slots, so slot j is position j; a local head of window w can
// keep a ring of S = w slots, because query p sees only keys [p - w + 1, p] (spec.first_key).
// Query p of head h attends to exactly the keys attention() lets it see, [spec.first_key(h, p),
// p], and each of them must still be in the cache: for every head,
//   position + t - spec.first_key(h, position) <= S.
//
// out_p = sum_j softmax_j(logit(q_p . k_j)) v_j, with the scale and soft cap of the spec, the
// same numbers attention() computes for those rows. Inference only: there is no backward, and an
// input that requires a gradient (outside NoGradGuard) is refused.
//
// Two entry points, one kernel per device behind them:
//   decode_attention         one cache for all heads; the caller has written the new keys.
//   decode_attention_cached  the generation step of one layer: the cache in its two head groups
//                            (local ring, global), the new token's key and value written into
//                            their slots by the kernel itself, the output in the layout c_proj
//                            reads. On a GPU that is one launch (two when a row's keys are split
//                            over blocks), whatever the mix of local and global heads.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/attention.h"

namespace keel {

// q (B, H, t, D), k, v (B, H, S, D) -> out (B, H, t, D), q's dtype and device.
// The caller writes the new tokens' keys and values into their slots before the call.
// Errors: ShapeError (not 4-D, B/H/D disagree, window count != H, a needed key outside the
// cache), ValueError (negative position or window, bad scale or cap), DTypeError, DeviceError,
// AutogradError (an input requires a gradient).
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        int64_t position);

// One layer's cached keys and values, in two head groups, local heads first as AttentionSpec::ls()
// orders them; a group without heads leaves its tensors undefined:
//   k_local, v_local    (B, Hl, W, D)  heads [0, Hl): a ring, the key of position j in slot j % W
//   k_global, v_global  (B, Hg, S, D)  heads [Hl, H): the key of position j in slot j (S > j)
// Both are "slot j % S" of their own S: what makes the first group a ring is only that W is
// shorter than the text, so the kernels never special-case it.
// position: undefined, or (1) i64 on the device holding the position of the step's token. On
// CUDA the kernel then reads the position from it rather than taking the host's (frozen in a
// step captured as a CUDA graph: nn/decode_graph.h) and sizes its grid for the slots the cache
// has, so one capture serves every position the cache can hold. The host's `position` is then
// only checked against the slots (a replay runs with the one of its capture); the CPU kernel
// always takes the host's.
struct DecodeCache {
  Tensor k_local, v_local;
  Tensor k_global, v_global;
  Tensor position{};  // {}: an initialiser list of the four cache tensors alone stays warning-free
  // On CUDA, (B * H) i32 zeros, or undefined: counters with which the blocks that split a row's
  // keys find the last of them, which merges the row, so a split step is one launch instead of
  // two (ops/cuda/decode_attention.cu). Zero again after every launch; ignored on the CPU.
  Tensor done{};
};

// q, k, v (B, H, 1, D): the new token at `position`, projected (and q/k-normed). Writes k and v
// into slot position % S of each head's group of `cache` (its tensors are written in place,
// their handles stay), then attends q over [spec.first_key(h, position), position], the new key
// included -> out (B, 1, H, D), q's dtype and device: heads side by side, so it reshapes to
// (B, 1, H * D) for c_proj without a copy. The rows equal attention()'s for that position.
// The cache tensors must be contiguous, in q's dtype and device, with Hl + Hg = H, and every
// head's window must fit its group: position + 1 - spec.first_key(h, position) <= S.
// Errors: as decode_attention (ShapeError also for t != 1 or a non-contiguous cache).
Tensor decode_attention_cached(const Tensor& q, const Tensor& k, const Tensor& v, const DecodeCache& cache,
                               const AttentionSpec& spec, int64_t position);

}  // namespace keel
