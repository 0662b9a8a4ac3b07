// The key/value cache for generation: each new token attends to the keys and values of the
// tokens before it without recomputing them.
//
// Heads are cached in two groups, as LS-attention splits them (AttentionSpec::local_heads(), the
// local ones first):
//   local heads   a ring of W slots, W the widest local window: the key of position j sits in
//                 slot j % W, overwriting position j - W, which no later query can see (query p
//                 sees keys [p - w + 1, p]). Its memory stays O(W) however long the text gets.
//   global heads  S >= length slots, the key of position j in slot j. S grows by doubling up to
//                 the context length (or is reserved up front), so appending a token copies
//                 nothing but the token.
// That is the memory side of the paper's inference-latency claim: at 8k context the paper's LS
// layer (5 local heads of w = 50, 1 global) caches 8192 + 5 * 50 positions where MHSA caches 6 * 8192.
#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/decode_attention.h"

namespace keel::nn {

// One layer's cache: k_local, v_local (B, H_local, W, D), the ring of the local heads;
// k_global, v_global (B, H_global, S, D), every key so far in slots [0, length). It is the
// DecodeCache that ops/decode_attention.h's fused decode step reads and writes.
using LayerKV = DecodeCache;

class KVCache {
 public:
  // max_length: the model's context length, the most positions the cache will ever hold.
  // capacity: global slots to allocate at the first step (0: as many as that step needs).
  KVCache(int64_t n_layer, int64_t max_length, int64_t capacity = 0)
      : layers(n_layer), max_length_(max_length), capacity_(capacity) {}

  int64_t length() const { return length_; }  // tokens processed so far
  void advance(int64_t t) { length_ += t; }
  int64_t max_length() const { return max_length_; }
  int64_t capacity() const { return capacity_; }  // global slots wanted up front
  int64_t bytes() const;  // memory the cached keys and values hold (allocated slots)
  void clear();           // forget the text; the next step starts at position 0

  std::vector<LayerKV> layers;

 private:
  int64_t length_ = 0, max_length_, capacity_;
};

// One attention step over the cache. q, k, v (B, H, t, D): the new tokens at positions
// [position, position + t), already projected (and q/k-normed). Writes k, v into the cache and
// returns (B, t, H, D), the rows attention(q_all, k_all, v_all, spec) would give for them, heads
// side by side as c_proj reads them (a reshape to (B, t, C), free after a decode step).
// At position 0 the tokens go through the fused attention op (a prompt costs what it costs in
// training, a local head O(t W)); after that each token is one decode_attention_cached step for
// all heads, which writes the token's key and value into the cache itself: one GPU launch, two
// when a global head's keys are split over blocks.
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, LayerKV& kv, const KVCache& cache,
                        int64_t position, const AttentionSpec& spec);

// For benchmarks: makes the empty `cache` hold `length` positions of random keys and values for
// a batch of B, in the slots a real text of that length fills (spec, D: the model's attention).
// A decode step after it costs what it costs after that text; its logits mean nothing.
void fill_random(KVCache& cache, int64_t B, int64_t length, const AttentionSpec& spec, int64_t D, DType dtype,
                 Device device, Generator& gen);

}  // namespace keel::nn
