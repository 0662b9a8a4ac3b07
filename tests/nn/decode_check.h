// Decode equals recompute: the logits of every token generated through the KV cache against
// those of the whole sequence run through the model at once. Shared by the CPU tests
// (test_kv_cache.cpp) and the CUDA ones (test_kv_cache_cuda.cpp).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/gpt2.h"
#include "ops/shape.h"

namespace keel::nn::testing {

// B sequences of T tokens for a vocabulary of V, fixed.
inline std::vector<int32_t> decode_tokens(int64_t B, int64_t T, int64_t V) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < B * T; ++i) t.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  return t;
}

// The worst row's relative error of got (B, t, V) against rows [from, from + t) of full (B, T, V):
// max over rows of ||got - want|| / ||want||.
inline double worst_logit_err(const Tensor& got, const std::vector<double>& full, int64_t T, int64_t from) {
  const int64_t B = got.size(0), t = got.size(1), V = got.size(2);
  const std::vector<double> g = got.to_vector<double>();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < t; ++a) {
      double num = 0, den = 0;
      for (int64_t k = 0; k < V; ++k) {
        const double x = g[(b * t + a) * V + k], y = full[(b * T + from + a) * V + k];
        if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
        num += (x - y) * (x - y);
        den += y * y;
      }
      worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
    }
  return worst;
}

// Runs `model` (on its device) over B x T tokens three ways and checks each against the full
// forward pass `full` (B, T, V) within `tol`: a prompt of `prompt` tokens (all logits, and the
// last only), one token at a time after it, and a chunk of 3 tokens after a prompt.
inline void check_decode_equals_recompute(GPT2& model, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                          const std::vector<double>& full, int64_t prompt, double tol) {
  NoGradGuard no_grad;
  const Device dev = model.wte.weight.device();
  const Tensor ids = from_vector(tokens, {B, T}).to(dev);
  auto part = [&](int64_t from, int64_t n) { return slice(ids, 1, from, from + n).contiguous(); };

  KVCache cache = model.make_cache();  // no capacity: the global slots grow as the text does
  CHECK(worst_logit_err(model.forward_cached(part(0, prompt), cache), full, T, 0) < tol);
  for (int64_t p = prompt; p < T; ++p) {
    CAPTURE(p);
    CHECK(worst_logit_err(model.forward_cached(part(p, 1), cache), full, T, p) < tol);
  }
  CHECK(cache.length() == T);

  KVCache last = model.make_cache(T);  // room for the whole text up front
  Tensor l = model.forward_cached(part(0, prompt), last, GPT2::Logits::last);
  CHECK(l.shape() == Shape{B, 1, model.config().vocab_size});
  CHECK(worst_logit_err(l, full, T, prompt - 1) < tol);
  CHECK(worst_logit_err(model.forward_cached(part(prompt, 3), last), full, T, prompt) < tol);
}

}  // namespace keel::nn::testing
