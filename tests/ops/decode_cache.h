// Caches for the decode_attention_cached tests (test_decode_attention_cached*.cpp): the two head
// groups of a text decoded up to a position, built on the host, with NaN in every slot that the
// text has not filled, so a kernel that reads a slot it should not (or fails to write the new
// token's) shows.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "ops/decode_attention.h"

namespace keel::decodetest {

// Heads [h0, h0 + n) of x (B, H, T, D) -> a cache (B, n, S, D) holding positions
// [end - S, end) ∩ [0, end) in slots j % S; every other slot NaN. x's dtype, on the CPU.
inline Tensor cache_of(const Tensor& x, int64_t h0, int64_t n, int64_t end, int64_t S) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const std::vector<double> X = x.to_vector<double>();
  std::vector<double> c(static_cast<size_t>(B * n * S * D), std::numeric_limits<double>::quiet_NaN());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t j = std::max<int64_t>(0, end - S); j < end; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t to = ((b * n + h) * S + j % S) * D + d, from = ((b * H + h0 + h) * T + j) * D + d;
          c[static_cast<size_t>(to)] = X[static_cast<size_t>(from)];
        }
  return from_vector(c, {B, n, S, D}, {x.dtype()});
}

// The cache of a text whose keys and values are k, v (B, H, T, D), holding positions [0, p):
// spec's local heads (first) in a ring of spec.max_local_window() slots, the global heads in S.
inline DecodeCache cache_before(const Tensor& k, const Tensor& v, const AttentionSpec& spec, int64_t p, int64_t S) {
  const int64_t H = spec.heads(), Hl = spec.local_heads(), W = spec.max_local_window();
  DecodeCache c;
  if (Hl > 0) c.k_local = cache_of(k, 0, Hl, p, W), c.v_local = cache_of(v, 0, Hl, p, W);
  if (Hl < H) c.k_global = cache_of(k, Hl, H - Hl, p, S), c.v_global = cache_of(v, Hl, H - Hl, p, S);
  return c;
}

}  // namespace keel::decodetest
