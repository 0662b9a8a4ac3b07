// Attention of a few new queries over a KV cache: the decode step of generation.
//
// q (B, H, t, D) are the queries of positions [position, position + t). k and v (B, H, S, D) are
// a cache of S slots per head: the key and value of position j sit in slot j % S. A global head's
// cache has at least position + t slots, so slot j is position j; a local head of window w can
// keep a ring of S = w slots, because query p sees only keys [p - w + 1, p] (spec.first_key).
// Query p of head h attends to exactly the keys attention() lets it see, [spec.first_key(h, p),
// p], and each of them must still be in the cache: for every head,
//   position + t - spec.first_key(h, position) <= S.
// The caller writes the new tokens' keys and values into their slots before the call.
//
// out_p = sum_j softmax_j(logit(q_p . k_j)) v_j, with the scale and soft cap of the spec, the
// same numbers attention() computes for those rows. Inference only: there is no backward, and an
// input that requires a gradient (outside NoGradGuard) is refused.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/attention.h"

namespace keel {

// q (B, H, t, D), k, v (B, H, S, D) -> out (B, H, t, D), q's dtype and device.
// Errors: ShapeError (not 4-D, B/H/D disagree, window count != H, a needed key outside the
// cache), ValueError (negative position or window, bad scale or cap), DTypeError, DeviceError,
// AutogradError (an input requires a gradient).
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        int64_t position);

}  // namespace keel
