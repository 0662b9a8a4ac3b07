// decode_attention(): argument checks, output allocation, dispatch to the kernels.
#include "ops/decode_attention.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/factory.h"
#include "ops/common.h"
#include "ops/cpu/decode_attention.h"
#include "ops/cuda/decode_attention.h"

namespace keel {

namespace {

constexpr const char* kOp = "decode_attention";

void check_arguments(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                     int64_t position) {
  detail::check_defined(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_same_device(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_floating(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_same_dtype(kOp, {{"q", q}, {"k", k}, {"v", v}});
  for (const detail::Arg& a : {detail::Arg{"q", q}, detail::Arg{"k", k}, detail::Arg{"v", v}})
    detail::check_dim(kOp, a, 4);
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3), S = k.size(2);
  if (k.shape() != v.shape() || k.size(0) != B || k.size(1) != H || k.size(3) != D)
    throw ShapeError(kOp,
                     "the cache must be (B, H, S, D) like q (B, H, t, D): " + detail::describe("q", q) + ", " +
                         detail::describe("k", k) + ", " + detail::describe("v", v));
  if (spec.heads() != H)
    throw ShapeError(kOp, "spec has " + std::to_string(spec.heads()) + " windows for " + std::to_string(H) + " heads");
  if (position < 0) throw ValueError(kOp, "negative position " + std::to_string(position));
  if (!(std::isfinite(spec.softcap) && spec.softcap >= 0))
    throw ValueError(kOp, "softcap is " + std::to_string(spec.softcap), "use 0 (no capping) or a cap c > 0");
  if (!std::isfinite(spec.scale)) throw ValueError(kOp, "softmax scale is " + std::to_string(spec.scale));
  for (int64_t h = 0; h < H; ++h) {
    if (spec.window[h] < 0)
      throw ValueError(kOp, "head " + std::to_string(h) + " has negative window " + std::to_string(spec.window[h]));
    // The first query reaches back furthest in slots: its first key to the last query.
    const int64_t span = t == 0 ? 0 : position + t - spec.first_key(h, position);
    if (span > S)
      throw ShapeError(kOp,
                       "head " + std::to_string(h) + " needs keys of " + std::to_string(span) + " positions, the cache holds " +
                           std::to_string(S) + " slots",
                       "a global head's cache needs position + t slots, a local head's its window + t - 1");
  }
  if (needs_grad({q, k, v}))
    throw AutogradError(kOp, "decode_attention has no backward",
                        "run generation under NoGradGuard, or use attention() for training");
}

}  // namespace

Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        int64_t position) {
  check_arguments(q, k, v, spec, position);
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor out = empty(q.shape(), {q.dtype(), q.device()});
  auto kernel = q.device().is_cuda() ? cuda::decode_attention_forward : cpu::decode_attention_forward;
  kernel(qc, kc, vc, spec.window, position, spec.resolved_scale(q.size(3)), spec.softcap, out);
  return out;
}

}  // namespace keel
