#include "nn/kv_cache.h"

#include <algorithm>
#include <string>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/decode_attention.h"
#include "ops/shape.h"

namespace keel::nn {

namespace {
int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * int64_t(dtype_size(t.dtype())) : 0; }

// x (B, h, n, D), the keys (or values) of positions [first, first + n) -> their slots j % S of
// cache (B, h, S, D), in at most two runs when the slots wrap around a ring.
void write_slots(Tensor& cache, const Tensor& x, int64_t first) {
  const int64_t S = cache.size(2), n = x.size(2);
  for (int64_t i = 0; i < n;) {
    const int64_t slot = (first + i) % S, len = std::min(n - i, S - slot);
    Tensor dst = narrow(cache, 2, slot, len);
    copy_(dst, narrow(x, 2, i, len));
    i += len;
  }
}

// (B, h, S, D) slots for tokens shaped like x (B, H, t, D), not yet written.
Tensor slots_for(const Tensor& x, int64_t h, int64_t S) {
  return empty({x.size(0), h, S, x.size(3)}, {x.dtype(), x.device()});
}

// Room for `needed` slots in c (B, h, S, D), keeping its first `kept`; x (B, H, t, D) gives the
// batch, head dim, dtype and device. Doubling, so a text of n tokens costs O(n) copies in all;
// never beyond what the cache may hold, never less than asked for.
void make_room(Tensor& c, const Tensor& x, int64_t h, int64_t needed, int64_t kept, const KVCache& cache) {
  if (c.defined() && c.size(2) >= needed) return;
  int64_t S = std::max(needed, cache.capacity());
  if (c.defined()) S = std::max(S, 2 * c.size(2));
  S = std::max(needed, std::min(S, cache.max_length()));
  Tensor fresh = slots_for(x, h, S);
  if (kept > 0) {
    Tensor dst = narrow(fresh, 2, 0, kept);
    copy_(dst, narrow(c, 2, 0, kept));
  }
  c = fresh;
}

// The decode counters of a layer (DecodeCache::done) for `rows` query rows, on a GPU: zeros, made
// once per text (or batch size) and left at zero by every step.
void make_counters(LayerKV& kv, int64_t rows, Device device) {
  if (!device.is_cuda() || (kv.done.defined() && kv.done.numel() == rows && kv.done.device() == device)) return;
  kv.done = zeros({rows}, {DType::i32, device});
}

}  // namespace

int64_t KVCache::bytes() const {
  int64_t n = 0;
  for (const LayerKV& l : layers) n += bytes_of(l.k_local) + bytes_of(l.v_local) + bytes_of(l.k_global) + bytes_of(l.v_global);
  return n;
}

void KVCache::clear() {
  for (LayerKV& l : layers) l = LayerKV{};
  length_ = 0;
}

// q, k, v (B, H, t, D) at positions [position, position + t) -> (B, t, H, D)
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, LayerKV& kv, const KVCache& cache,
                        int64_t position, const AttentionSpec& spec) {
  const int64_t H = q.size(1), t = q.size(2), Hl = spec.local_heads(), Hg = H - Hl;
  for (int64_t h = 0; h < Hl; ++h)
    if (!spec.is_local(h))
      throw ConfigError("KVCache", "head " + std::to_string(h) + " is global but a later head is local",
                        "the cache keeps local heads first, as AttentionSpec::ls() and GPT2Config order them");
  if (t > 1 && position > 0) {
    // A ring of W slots holds one query's window, not t queries': one token at a time.
    std::vector<Tensor> outs;
    for (int64_t a = 0; a < t; ++a)
      outs.push_back(cached_attention(narrow(q, 2, a, 1), narrow(k, 2, a, 1), narrow(v, 2, a, 1), kv, cache,
                                      position + a, spec));
    return concat(outs, 1);
  }
  if (position == 0) kv = LayerKV{};  // a new text, perhaps of another batch size
  if (Hl > 0 && !kv.k_local.defined()) {
    const int64_t W = spec.max_local_window();
    kv.k_local = slots_for(k, Hl, W), kv.v_local = slots_for(v, Hl, W);
  }
  if (Hg > 0) {  // room for this step's keys; grows by doubling, so rarely copies
    make_room(kv.k_global, k, Hg, position + t, position, cache);
    make_room(kv.v_global, v, Hg, position + t, position, cache);
  }
  // A decode step: the kernel writes the token's key and value into their slots itself, and on
  // a GPU the blocks that split a row's keys merge it in the same launch, by a counter per row
  // (made with the cache, below and in fill_random: not a per-token cost).
  make_counters(kv, q.size(0) * H, q.device());
  if (position > 0) return decode_attention_cached(q, k, v, kv, spec, position);

  // A prompt: the fused attention op, then its keys and values into the cache.
  if (Hl > 0) {
    const int64_t n = std::min(t, kv.k_local.size(2));  // older keys of a long prompt are out of every later window
    write_slots(kv.k_local, narrow(narrow(k, 1, 0, Hl), 2, t - n, n), t - n);
    write_slots(kv.v_local, narrow(narrow(v, 1, 0, Hl), 2, t - n, n), t - n);
  }
  if (Hg > 0) {
    write_slots(kv.k_global, narrow(k, 1, Hl, Hg), 0);
    write_slots(kv.v_global, narrow(v, 1, Hl, Hg), 0);
  }
  return transpose(attention(q, k, v, spec).out, 1, 2);
}

void fill_random(KVCache& cache, int64_t B, int64_t length, const AttentionSpec& spec, int64_t D, DType dtype,
                 Device device, Generator& gen) {
  if (cache.length() != 0) throw ValueError("fill_random", "the cache already holds a text", "clear() it first");
  if (length < 1 || length > cache.max_length())
    throw ValueError("fill_random", "length " + std::to_string(length) + " outside [1, " +
                                        std::to_string(cache.max_length()) + "]");
  const int64_t Hl = spec.local_heads(), Hg = spec.heads() - Hl;
  const Tensor like = empty({B, spec.heads(), 1, D}, {dtype, device});
  for (LayerKV& kv : cache.layers) {
    kv = LayerKV{};
    if (Hl > 0) {
      const int64_t W = spec.max_local_window();
      kv.k_local = randn({B, Hl, W, D}, gen, {dtype, device});
      kv.v_local = randn({B, Hl, W, D}, gen, {dtype, device});
    }
    if (Hg > 0) {
      make_room(kv.k_global, like, Hg, length, 0, cache);
      make_room(kv.v_global, like, Hg, length, 0, cache);
      write_slots(kv.k_global, randn({B, Hg, length, D}, gen, {dtype, device}), 0);
      write_slots(kv.v_global, randn({B, Hg, length, D}, gen, {dtype, device}), 0);
    }
    make_counters(kv, B * spec.heads(), device);
  }
  cache.advance(length);
}

}  // namespace keel::nn
