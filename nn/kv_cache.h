// The key/value cache for generation: each new token attends to the keys and values of the
// tokens before it without recomputing them.
//
// Heads are cached in two groups, as LS-attention splits them: global heads keep every key
// (the cache grows with the text), local heads keep only their last w - 1 keys (all that the
// next token's window can reach besides itself), so their cache stays O(w) however long the
// text gets. That is the memory side of the paper's inference-latency claim.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace keel::nn {

struct LayerKV {
  Tensor k_local, v_local;    // (B, H_local, <= w-1, D): the last keys of the local heads
  Tensor k_global, v_global;  // (B, H_global, L, D): every key so far
};

class KVCache {
 public:
  KVCache(int64_t n_layer, int64_t n_local_heads, int64_t window)
      : layers(n_layer), n_local(n_local_heads), window(window) {}

  int64_t length() const { return length_; }  // tokens processed so far
  void advance(int64_t t) { length_ += t; }
  int64_t bytes() const;  // memory held by the cached keys and values
  void clear();

  std::vector<LayerKV> layers;
  int64_t n_local, window;  // heads [0, n_local) are local with this window; 0 local = none

 private:
  int64_t length_ = 0;
};

// One attention step over the cache. q, k, v (B, H, t, D): the new tokens at positions
// [cache position, + t), already projected (and q/k-normed). Appends k, v to `kv`, trims the
// local heads to their window, and returns (B, H, t, D). scale and softcap as in AttentionSpec.
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, LayerKV& kv, int64_t position,
                        int64_t n_local, int64_t window, double scale, double softcap);

}  // namespace keel::nn
