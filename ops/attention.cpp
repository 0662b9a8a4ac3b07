// attention(): argument checks, output allocation, the autograd node, dispatch to the kernels.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/common.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"
#include "ops/op_costs.h"

namespace keel {

AttentionSpec AttentionSpec::mhsa(int64_t H) {
  if (H < 0) throw ValueError("AttentionSpec::mhsa", "negative head count " + std::to_string(H));
  return {0.0, std::vector<int64_t>(H, 0)};
}

AttentionSpec AttentionSpec::ls(int64_t H, int64_t local_heads, int64_t w) {
  if (H < 0 || local_heads < 0 || local_heads > H)
    throw ValueError("AttentionSpec::ls",
                     "local_heads = " + std::to_string(local_heads) + " with H = " + std::to_string(H),
                     "local_heads must be in [0, H]");
  // w = 0 would silently turn the local heads global, so it is refused here.
  if (w < 1)
    throw ValueError("AttentionSpec::ls", "window " + std::to_string(w) + " for the local heads",
                     "a local head sees the last w >= 1 keys; use mhsa() for full causal heads");
  AttentionSpec spec = mhsa(H);
  for (int64_t h = 0; h < local_heads; ++h) spec.window[h] = w;
  return spec;
}

int64_t AttentionSpec::local_heads() const {
  int64_t n = 0;
  for (int64_t h = 0; h < heads(); ++h) n += is_local(h) ? 1 : 0;
  return n;
}

int64_t AttentionSpec::max_local_window() const {
  int64_t w = 0;
  for (int64_t x : window) w = std::max(w, x);
  return w;
}

double AttentionSpec::resolved_scale(int64_t D) const {
  if (scale != 0) return scale;
  // With D = 0 every logit is 0 whatever the scale; 1 avoids 0 * inf = NaN.
  return D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
}

AttentionSpec AttentionSpec::head_range(int64_t first, int64_t n) const {
  if (first < 0 || n < 0 || first + n > heads())
    throw ValueError("AttentionSpec::head_range",
                     "heads [" + std::to_string(first) + ", " + std::to_string(first + n) + ") of " +
                         std::to_string(heads()));
  AttentionSpec s = *this;
  s.window.assign(window.begin() + first, window.begin() + first + n);
  return s;
}

namespace {

constexpr const char* kOp = "attention";

void check_arguments(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  // Order matters for the messages a user sees: existence, then device, then dtype, then shape.
  detail::check_defined(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_same_device(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_floating(kOp, {{"q", q}, {"k", k}, {"v", v}});
  detail::check_same_dtype(kOp, {{"q", q}, {"k", k}, {"v", v}});
  for (const detail::Arg& a : {detail::Arg{"q", q}, detail::Arg{"k", k}, detail::Arg{"v", v}})
    if (a.second.dim() != 4)
      throw ShapeError(kOp, std::string("expected (B, H, T, D) tensors, got ") + detail::describe(a.first, a.second),
                       "split heads first: reshape (B, T, C) to (B, T, H, D) and transpose to (B, H, T, D)");
  if (q.shape() != k.shape() || q.shape() != v.shape())
    throw ShapeError(kOp,
                     "q, k and v must have the same shape: " + detail::describe("q", q) + ", " +
                         detail::describe("k", k) + ", " + detail::describe("v", v),
                     "self-attention projects one input to q, k, v of equal shape (B, H, T, D)");
  const int64_t H = q.size(1);
  if (static_cast<int64_t>(spec.window.size()) != H)
    throw ShapeError(kOp,
                     "spec has " + std::to_string(spec.window.size()) + " windows for " + std::to_string(H) +
                         " heads: " + detail::describe("q", q),
                     "give one window per head (AttentionSpec::mhsa(H) or AttentionSpec::ls(H, local, w))");
  for (int64_t h = 0; h < H; ++h)
    if (spec.window[h] < 0)
      throw ValueError(kOp, "head " + std::to_string(h) + " has negative window " + std::to_string(spec.window[h]),
                       "window 0 is full causal, w >= 1 sees the last w keys");
  if (!(std::isfinite(spec.softcap) && spec.softcap >= 0))
    throw ValueError(kOp, "softcap is " + std::to_string(spec.softcap), "use 0 (no capping) or a cap c > 0");
  if (!std::isfinite(spec.scale))
    throw ValueError(kOp, "softmax scale is " + std::to_string(spec.scale),
                     "use a finite scale, or 0 for 1/sqrt(D)");
}

// Saves what the flash backward needs: inputs, output and the row log-sum-exp, not the T x T
// probabilities, which backward recomputes.
struct AttentionBackward : Node {
  Tensor q, k, v, out, lse;  // detached, q, k, v as the caller's views; lse f32 on CUDA, q's dtype on the CPU
  std::vector<int64_t> window;
  double scale = 1, softcap = 0;

  const char* name() const override { return "AttentionBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor dout = grad_out.detach();  // a transposed view as it comes: the kernels read it in place
    if (dout.dtype() != q.dtype()) dout = dout.to(q.dtype());
    Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v);
    auto kernel = q.device().is_cuda() ? cuda::attention_backward : cpu::attention_backward;
    kernel(q, k, v, out, lse, dout, window, scale, softcap, dq, dk, dv);
    return {dq, dk, dv};
  }
  void release() override { q = k = v = out = lse = {}; }
  profiler::Cost cost(const Tensor&) const override { return op_costs::attention_backward(q, window, lse.dtype()); }
};

// x (B, T, n C) with packed rows -> the heads (B, H, T, D) of its columns [part C, part C + C) as a
// view: head h is columns part C + [h D, h D + D) of each row (D = C / H).
Tensor heads_of(const Tensor& x, int64_t H, int64_t n = 1, int64_t part = 0) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / n, D = C / H;
  return x.as_strided({B, H, T, D}, {x.strides()[0], D, x.strides()[1], 1}, x.offset() + part * C);
}

// qkv (B, T, 3C) with packed rows -> q, k, v (B, H, T, D) as views of its three thirds.
struct PackedHeads {
  Tensor q, k, v;
  PackedHeads(const Tensor& qkv, int64_t H) : q(heads_of(qkv, H, 3, 0)), k(heads_of(qkv, H, 3, 1)), v(heads_of(qkv, H, 3, 2)) {}
};

// The forward kernel of q's device into out (B, H, T, D), any view the kernels take; allocates
// r's statistics and returns the row log-sum-exp (B, H, T): f32 on CUDA whatever the input dtype,
// the input's on the CPU (whose kernel raises DTypeError for bf16/f16).
Tensor run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec, double scale,
                   Tensor& out, AttentionResult& r) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  r.max_logit = empty({H}, {DType::f32, q.device()});
  r.max_range = empty({H}, {DType::f32, q.device()});
  Tensor lse = empty({B, H, T}, {q.device().is_cuda() ? DType::f32 : q.dtype(), q.device()});
  auto kernel = q.device().is_cuda() ? cuda::attention_forward : cpu::attention_forward;
  kernel(q, k, v, spec.window, scale, spec.softcap, out, lse, r.max_logit, r.max_range);
  return lse;
}

// attention_packed's node: the (B, T, 3C) input's gradient in one tensor, written by the kernel
// through three strided views.
struct AttentionPackedBackward : Node {
  Tensor qkv, out, lse;  // qkv (B, T, 3C) and out (B, T, C) packed, detached
  std::vector<int64_t> window;
  double scale = 1, softcap = 0;

  const char* name() const override { return "AttentionPackedBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor dout = grad_out.detach().contiguous();
    if (dout.dtype() != qkv.dtype()) dout = dout.to(qkv.dtype());
    Tensor dqkv = empty_like(qkv);  // every element written: dq, dk, dv tile it
    const int64_t H = static_cast<int64_t>(window.size());
    const PackedHeads in(qkv, H), d(dqkv, H);
    Tensor dq = d.q, dk = d.k, dv = d.v;
    auto kernel = qkv.device().is_cuda() ? cuda::attention_backward : cpu::attention_backward;
    kernel(in.q, in.k, in.v, heads_of(out, H), lse, heads_of(dout, H), window, scale, softcap, dq, dk, dv);
    return {dqkv};
  }
  void release() override { qkv = out = lse = {}; }
  profiler::Cost cost(const Tensor&) const override {
    return op_costs::attention_backward(PackedHeads(qkv, static_cast<int64_t>(window.size())).q, window,
                                        lse.dtype());
  }
};

}  // namespace

AttentionResult attention_packed(const Tensor& qkv, const AttentionSpec& spec) {
  const int64_t H = spec.heads();
  detail::check_defined(kOp, {{"qkv", qkv}});
  if (qkv.dim() != 3 || H < 1 || qkv.size(2) % (3 * H) != 0)
    throw ShapeError(kOp,
                     "expected qkv (B, T, 3C) with C a multiple of the " + std::to_string(H) + " heads, got " +
                         detail::describe("qkv", qkv),
                     "pass the q, k, v projection (one linear layer to 3C) and one window per head");
  const Tensor x = qkv.detach().contiguous();
  const PackedHeads heads(x, H);
  check_arguments(heads.q, heads.k, heads.v, spec);
  profiler::Scope prof(kOp);
  if (prof) prof.cost(op_costs::attention(heads.q, spec.window, qkv.device().is_cuda() ? DType::f32 : qkv.dtype()));
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / 3, D = C / H;
  const double scale = spec.resolved_scale(D);
  AttentionResult r;
  r.out = empty({B, T, C}, {qkv.dtype(), qkv.device()});
  Tensor out_heads = heads_of(r.out, H);
  const Tensor lse = run_forward(heads.q, heads.k, heads.v, spec, scale, out_heads, r);

  if (needs_grad({qkv})) {
    auto node = std::make_shared<AttentionPackedBackward>();
    node->qkv = x;
    node->out = r.out.detach();
    node->lse = lse;
    node->window = spec.window;
    node->scale = scale;
    node->softcap = spec.softcap;
    connect(r.out, node, {qkv});
  }
  return r;
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  check_arguments(q, k, v, spec);
  profiler::Scope prof(kOp);
  if (prof) prof.cost(op_costs::attention(q, spec.window, q.device().is_cuda() ? DType::f32 : q.dtype()));
  // The kernels read strided views in place (a transposed (B, T, H, D) tensor, say) and copy only
  // what their layout rule refuses (ops/cuda/attention_common.cuh, kernel_layout).
  Tensor qc = q.detach(), kc = k.detach(), vc = v.detach();
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const double scale = spec.resolved_scale(D);
  AttentionResult r;
  r.out = empty({B, H, T, D}, {q.dtype(), q.device()});
  const Tensor lse = run_forward(qc, kc, vc, spec, scale, r.out, r);

  if (needs_grad({q, k, v})) {
    auto node = std::make_shared<AttentionBackward>();
    node->q = qc;
    node->k = kc;
    node->v = vc;
    node->out = r.out.detach();  // detached: saving the output itself would be a cycle
    node->lse = lse;
    node->window = spec.window;
    node->scale = scale;
    node->softcap = spec.softcap;
    connect(r.out, node, {q, k, v});
  }
  return r;
}

}  // namespace keel
