// decode_attention() and decode_attention_cached(): argument checks, output allocation, dispatch
// to the one kernel of each device.
#include "ops/decode_attention.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "ops/common.h"
#include "ops/op_costs.h"
#include "ops/cpu/decode_attention.h"
#include "ops/cuda/decode_attention.h"

namespace keel {

namespace {

// The spec's scale and cap, and its windows against H heads.
void check_spec(const char* op, const AttentionSpec& spec, int64_t H, int64_t position) {
  if (spec.heads() != H)
    throw ShapeError(op, "spec has " + std::to_string(spec.heads()) + " windows for " + std::to_string(H) + " heads");
  if (position < 0) throw ValueError(op, "negative position " + std::to_string(position));
  if (!(std::isfinite(spec.softcap) && spec.softcap >= 0))
    throw ValueError(op, "softcap is " + std::to_string(spec.softcap), "use 0 (no capping) or a cap c > 0");
  if (!std::isfinite(spec.scale)) throw ValueError(op, "softmax scale is " + std::to_string(spec.scale));
  for (int64_t h = 0; h < H; ++h)
    if (spec.window[h] < 0)
      throw ValueError(op, "head " + std::to_string(h) + " has negative window " + std::to_string(spec.window[h]));
}

// Every key head h's queries [position, position + t) need must still be in its S slots: the
// first query reaches back furthest in slots, from its first key to the last query.
void check_span(const char* op, const AttentionSpec& spec, int64_t h, int64_t position, int64_t t, int64_t S) {
  const int64_t span = t == 0 ? 0 : position + t - spec.first_key(h, position);
  if (span > S)
    throw ShapeError(op,
                     "head " + std::to_string(h) + " needs keys of " + std::to_string(span) + " positions, the cache holds " +
                         std::to_string(S) + " slots",
                     "a global head's cache needs position + t slots, a local head's its window + t - 1");
}

void check_no_grad(const char* op, const std::vector<Tensor>& inputs) {
  if (needs_grad(inputs))
    throw AutogradError(op, std::string(op) + " has no backward",
                        "run generation under NoGradGuard, or use attention() for training");
}

// The kernel of q's device.
auto kernel_for(const Tensor& q) {
  return q.device().is_cuda() ? cuda::decode_attention_forward : cpu::decode_attention_forward;
}

}  // namespace

Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        int64_t position) {
  constexpr const char* kOp = "decode_attention";
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
  check_spec(kOp, spec, H, position);
  for (int64_t h = 0; h < H; ++h) check_span(kOp, spec, h, position, t, S);
  check_no_grad(kOp, {q, k, v});

  profiler::Scope prof(kOp);
  if (prof) prof.cost(op_costs::decode_attention(q, spec.window, position, false));
  // One cache for every head: the kernels' "global" group, with nothing to write.
  const DecodeCache cache{Tensor(), Tensor(), k.contiguous(), v.contiguous(), Tensor()};
  Tensor out = empty(q.shape(), {q.dtype(), q.device()});
  kernel_for(q)(q.contiguous(), Tensor(), Tensor(), cache, spec.window, position, spec.resolved_scale(D),
                spec.softcap, out);
  return out;
}

Tensor decode_attention_cached(const Tensor& q, const Tensor& k, const Tensor& v, const DecodeCache& cache,
                               const AttentionSpec& spec, int64_t position) {
  constexpr const char* kOp = "decode_attention_cached";
  detail::check_defined(kOp, {{"q", q}, {"k", k}, {"v", v}});
  std::vector<detail::Arg> all = {{"q", q}, {"k", k}, {"v", v}};
  if (cache.k_local.defined() || cache.v_local.defined())
    all.insert(all.end(), {{"cache.k_local", cache.k_local}, {"cache.v_local", cache.v_local}});
  if (cache.k_global.defined() || cache.v_global.defined())
    all.insert(all.end(), {{"cache.k_global", cache.k_global}, {"cache.v_global", cache.v_global}});
  detail::check_defined(kOp, all);
  detail::check_same_device(kOp, all);
  detail::check_floating(kOp, all);
  detail::check_same_dtype(kOp, all);
  for (const detail::Arg& a : all) detail::check_dim(kOp, a, 4);
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3);
  if (k.shape() != q.shape() || v.shape() != q.shape() || t != 1)
    throw ShapeError(kOp, "q, k and v must be the new token's, (B, H, 1, D): " + detail::describe("q", q) + ", " +
                              detail::describe("k", k) + ", " + detail::describe("v", v),
                     "several tokens after a prompt go one at a time (nn/kv_cache.cpp)");
  // The groups: (B, Hl, S0, D) and (B, Hg, S1, D), k and v alike, contiguous (written in place).
  int64_t heads = 0;
  for (size_t i = 3; i < all.size(); i += 2) {
    const Tensor &kc = all[i].second, &vc = all[i + 1].second;
    if (kc.shape() != vc.shape() || kc.size(0) != B || kc.size(3) != D)
      throw ShapeError(kOp, "a cache group must be (B, heads, S, D) for k and v alike, B and D as q's: " +
                                detail::describe("q", q) + ", " + detail::describe(all[i].first, kc) + ", " +
                                detail::describe(all[i + 1].first, vc));
    if (!kc.is_contiguous() || !vc.is_contiguous())
      throw ShapeError(kOp, std::string(all[i].first) + " is not contiguous",
                       "the kernel writes the new token into it in place");
    heads += kc.size(1);
  }
  if (heads != H)
    throw ShapeError(kOp, "the cache groups hold " + std::to_string(heads) + " heads for q's " + std::to_string(H));
  check_spec(kOp, spec, H, position);
  const int64_t Hl = cache.k_local.defined() ? cache.k_local.size(1) : 0;
  for (int64_t h = 0; h < H; ++h)
    check_span(kOp, spec, h, position, 1, h < Hl ? cache.k_local.size(2) : cache.k_global.size(2));
  check_no_grad(kOp, {q, k, v});
  if (cache.position.defined() &&
      (cache.position.dtype() != DType::i64 || cache.position.numel() != 1 || cache.position.device() != q.device()))
    throw ShapeError(kOp, "cache.position must be one i64 on q's device: " + detail::describe("position", cache.position));

  profiler::Scope prof(kOp);
  if (prof) prof.cost(op_costs::decode_attention(q, spec.window, position, true));
  Tensor out = empty({B, 1, H, D}, {q.dtype(), q.device()});  // the memory of (B, H, 1, D)
  kernel_for(q)(q.contiguous(), k.contiguous(), v.contiguous(), cache, spec.window, position, spec.resolved_scale(D),
                spec.softcap, out);
  return out;
}

}  // namespace keel
