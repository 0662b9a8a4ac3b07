#include "nn/kv_cache.h"

#include <cmath>
#include <limits>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/matmul.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace keel::nn {

namespace {
int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * int64_t(dtype_size(t.dtype())) : 0; }

// 0 where query position `first_query + a` may see key position `first_key + j`, -inf elsewhere.
// (t, L), added to the logits before the softmax.
Tensor window_mask(int64_t first_query, int64_t t, int64_t first_key, int64_t L, int64_t w, DType dtype,
                   Device device) {
  std::vector<double> m(t * L);
  for (int64_t a = 0; a < t; ++a)
    for (int64_t j = 0; j < L; ++j) {
      int64_t i = first_query + a, key = first_key + j;
      bool ok = key <= i && (w == 0 || key > i - w);
      m[a * L + j] = ok ? 0.0 : -std::numeric_limits<double>::infinity();
    }
  return from_vector(m, {t, L}, {dtype, device});
}

// q (B, h, t, D) against keys/values (B, h, L, D) whose first position is first_key -> (B, h, t, D)
Tensor attend(const Tensor& q, const Tensor& K, const Tensor& V, int64_t position, int64_t first_key, int64_t w,
              double scale, double softcap) {
  Tensor s = mul(matmul(q, transpose(K, -2, -1)), scale);  // (B, h, t, L)
  if (softcap > 0) s = mul(tanh(mul(s, 1.0 / softcap)), softcap);
  s = add(s, window_mask(position, q.size(2), first_key, K.size(2), w, s.dtype(), s.device()));
  return matmul(softmax(s, -1), V);
}

Tensor append(const Tensor& cache, const Tensor& x) { return cache.defined() ? concat({cache, x}, 2) : x.contiguous(); }
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

Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, LayerKV& kv, int64_t position,
                        int64_t n_local, int64_t window, double scale, double softcap) {
  const int64_t H = q.size(1), t = q.size(2), end = position + t;
  std::vector<Tensor> outs;
  if (n_local > 0) {
    Tensor kl = append(kv.k_local, narrow(k, 1, 0, n_local)), vl = append(kv.v_local, narrow(v, 1, 0, n_local));
    outs.push_back(attend(narrow(q, 1, 0, n_local), kl, vl, position, end - kl.size(2), window, scale, softcap));
    // The next token sees itself and the w - 1 keys before it: keep no more than those.
    int64_t keep = std::min<int64_t>(kl.size(2), window - 1);
    kv.k_local = narrow(kl, 2, kl.size(2) - keep, keep).contiguous();
    kv.v_local = narrow(vl, 2, vl.size(2) - keep, keep).contiguous();
  }
  if (n_local < H) {
    const int64_t hg = H - n_local;
    kv.k_global = append(kv.k_global, narrow(k, 1, n_local, hg));
    kv.v_global = append(kv.v_global, narrow(v, 1, n_local, hg));
    outs.push_back(attend(narrow(q, 1, n_local, hg), kv.k_global, kv.v_global, position, 0, 0, scale, softcap));
  }
  return outs.size() == 1 ? outs[0] : concat(outs, 1);
}

}  // namespace keel::nn
