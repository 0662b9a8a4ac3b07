// The formulas of ops/op_costs.h.
#include "ops/op_costs.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/common.h"

namespace keel::op_costs {

namespace {
bool half(DType d) { return d == DType::bf16 || d == DType::f16; }
double n_of(const Tensor& t) { return double(t.numel()); }
}  // namespace

double bytes_of(const Shape& shape, DType dtype) { return double(numel_of(shape)) * double(dtype_size(dtype)); }
double bytes_of(const Tensor& t) { return t.defined() ? bytes_of(t.shape(), t.dtype()) : 0.0; }

Cost matmul(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape out = matmul_batch_shape(a, b, "matmul");
  const double batch = double(numel_of(out));
  out.push_back(M), out.push_back(N);
  Cost c;
  c.kind = profiler::Kind::matmul;
  c.half = half(a.dtype());
  c.aligned = M % 8 == 0 && N % 8 == 0 && K % 8 == 0;
  c.flops = 2.0 * batch * double(M) * double(N) * double(K);
  c.bytes = bytes_of(a) + bytes_of(b) + bytes_of(out, a.dtype());
  c.shape = shape_str(a.shape()) + "x" + shape_str(b.shape());
  c.by_shape = true;
  return c;
}

Cost matmul_backward(const Shape& grad, const Shape& a, const Shape& b, DType dtype, bool need_a, bool need_b) {
  // Each gradient is one product of the forward's size: da = grad b^T, db = a^T grad.
  const double M = double(a[a.size() - 2]), K = double(a.back()), N = double(b.back());
  const double batch = double(numel_of(grad)) / std::max(1.0, M * N);
  Cost c;
  c.kind = profiler::Kind::matmul;
  c.half = half(dtype);
  c.aligned = int64_t(M) % 8 == 0 && int64_t(N) % 8 == 0 && int64_t(K) % 8 == 0;
  const double one = 2.0 * batch * M * N * K;
  if (need_a) c.flops += one, c.bytes += bytes_of(grad, dtype) + bytes_of(b, dtype) + bytes_of(a, dtype);
  if (need_b) c.flops += one, c.bytes += bytes_of(grad, dtype) + bytes_of(a, dtype) + bytes_of(b, dtype);
  c.shape = shape_str(a) + "x" + shape_str(b);
  c.by_shape = true;
  return c;
}

namespace {
// (M, K) @ (K, N)^T [+ bias (N)] in `dtype`
Cost linear_cost(int64_t M, int64_t K, int64_t N, DType dtype, bool bias) {
  const double es = double(dtype_size(dtype));
  Cost c;
  c.kind = profiler::Kind::matmul;
  c.half = half(dtype);
  c.aligned = M % 8 == 0 && N % 8 == 0 && K % 8 == 0;
  c.flops = 2.0 * double(M) * double(N) * double(K) + (bias ? double(M) * double(N) : 0.0);
  c.bytes = (double(M * K) + double(N * K) + (bias ? double(N) : 0.0) + double(M * N)) * es;
  c.shape = fmt::format("[{},{}]x[{},{}]", M, K, K, N);
  c.by_shape = true;
  return c;
}
// grad (M, N) of a product with K in-features
Cost linear_backward_cost(int64_t M, int64_t N, int64_t K, DType dtype, bool dx, bool dw, bool db) {
  const double es = double(dtype_size(dtype)), g = double(M * N) * es;
  Cost c;
  c.kind = profiler::Kind::matmul;
  c.half = half(dtype);
  c.aligned = M % 8 == 0 && N % 8 == 0 && K % 8 == 0;
  const double one = 2.0 * double(M) * double(N) * double(K);
  if (dx) c.flops += one, c.bytes += g + double(N * K) * es + double(M * K) * es;  // grad, weight -> dx
  if (dw) c.flops += one, c.bytes += g + double(M * K) * es + double(N * K) * es;  // grad, x -> dweight
  if (db) c.flops += double(M * N), c.bytes += g + double(N) * es;
  c.shape = fmt::format("[{},{}]x[{},{}]", M, K, K, N);
  c.by_shape = true;
  return c;
}
}  // namespace

Cost linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t K = weight.size(1);
  return linear_cost(x.numel() / std::max<int64_t>(1, K), K, weight.size(0), x.dtype(), bias.defined());
}

Cost linear_backward(const Tensor& grad, int64_t K, bool dx, bool dw, bool db) {
  const int64_t N = grad.size(-1);
  return linear_backward_cost(grad.numel() / std::max<int64_t>(1, N), N, K, grad.dtype(), dx, dw, db);
}

Cost linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, bool pre) {
  Cost c = linear(x, weight, bias);
  const double out = double(x.numel() / std::max<int64_t>(1, weight.size(1))) * double(weight.size(0));
  c.flops += kGeluFwd * out;
  if (pre) c.bytes += out * double(dtype_size(x.dtype()));
  return c;
}

Cost linear_gelu_backward(const Tensor& grad, int64_t K, bool dx, bool dw, bool db) {
  Cost c = linear_backward(grad, K, dx, dw, db);
  const Cost g = gelu_backward(grad);  // grad, pre -> d(pre), all of grad's shape and dtype
  c.flops += g.flops, c.bytes += g.bytes;
  return c;
}

Cost add_layernorm_linear(const Tensor& x, bool residual, bool ln_bias, const Tensor& weight, const Tensor& bias,
                          bool gelu) {
  const int64_t C = x.size(-1), M = x.numel() / std::max<int64_t>(1, C), N = weight.size(0);
  const double es = double(dtype_size(x.dtype())), rows = double(M) * double(C);
  Cost c = linear_cost(M, C, N, x.dtype(), bias.defined());  // x's rows, weight, bias -> out
  c.flops += (residual ? rows : 0.0) + kLayerNormFwd * rows + (gelu ? kGeluFwd * double(M) * double(N) : 0.0);
  c.bytes += (residual ? 2 * rows * es : 0.0) + (ln_bias ? 2.0 : 1.0) * double(C) * es;  // y read, h written; ln
  return c;
}

Cost mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
         const Tensor& proj_bias, bool pre) {
  const int64_t C = fc_weight.size(1), H = fc_weight.size(0), D = proj_weight.size(0);
  const int64_t M = x.numel() / std::max<int64_t>(1, C);
  Cost c = linear_gelu(x, fc_weight, fc_bias, pre);
  const Cost p = linear_cost(M, H, D, x.dtype(), proj_bias.defined());
  c.flops += p.flops, c.bytes += p.bytes;
  c.aligned = c.aligned && p.aligned;
  c.shape = fmt::format("[{},{}]x[{},{}]x[{},{}]", M, C, C, H, H, D);
  return c;
}

Cost mlp_backward(const Tensor& grad, int64_t H, int64_t C, bool dx, bool dfc_w, bool dfc_b, bool dproj_w,
                  bool dproj_b) {
  const bool fc = dx || dfc_w || dfc_b;
  const int64_t D = grad.size(-1), M = grad.numel() / std::max<int64_t>(1, D);
  // c_proj: grad (M, D) -> d(pre) (M, H) when c_fc's gradients are wanted, dproj_w, dproj_b
  Cost c = linear_backward_cost(M, D, H, grad.dtype(), fc, dproj_w, dproj_b);
  if (fc) {
    const double hidden = double(M) * double(H);
    c.flops += kGeluBwd * hidden, c.bytes += hidden * double(dtype_size(grad.dtype()));  // the epilogue reads pre
    const Cost f = linear_backward_cost(M, H, C, grad.dtype(), dx, dfc_w, dfc_b);  // c_fc, from d(pre)
    c.flops += f.flops, c.bytes += f.bytes;
    c.aligned = c.aligned && f.aligned;
  }
  c.shape = fmt::format("[{},{}]x[{},{}]x[{},{}]", M, C, C, H, H, D);
  return c;
}

double attention_pairs(int64_t T, int64_t w) {
  if (w <= 0 || w >= T) return double(T) * double(T + 1) / 2;
  return double(w) * double(w + 1) / 2 + double(T - w) * double(w);  // the first w queries see fewer
}

namespace {
Cost attention_cost(const Tensor& q, const std::vector<int64_t>& window, DType lse_dtype, bool backward) {
  const int64_t B = q.size(0), T = q.size(2), D = q.size(3);
  double pairs = 0;
  for (int64_t w : window) pairs += attention_pairs(T, w);
  Cost c;
  c.kind = backward ? profiler::Kind::attention_backward : profiler::Kind::attention;
  c.half = half(q.dtype());
  c.flops = (backward ? 10.0 : 4.0) * double(D) * double(B) * pairs;
  const double qkvo = bytes_of(q), lse = bytes_of({B, q.size(1), T}, lse_dtype);
  // forward: q, k, v -> out, lse; backward: q, k, v, out, dout, lse -> dq, dk, dv
  c.bytes = backward ? 8 * qkvo + lse : 4 * qkvo + lse;
  c.shape = shape_str(q.shape());
  return c;
}
}  // namespace

Cost attention(const Tensor& q, const std::vector<int64_t>& window, DType lse_dtype) {
  return attention_cost(q, window, lse_dtype, false);
}
Cost attention_backward(const Tensor& q, const std::vector<int64_t>& window, DType lse_dtype) {
  return attention_cost(q, window, lse_dtype, true);
}

Cost decode_attention(const Tensor& q, const std::vector<int64_t>& window, int64_t position, bool writes_kv) {
  const int64_t B = q.size(0), t = q.size(2), D = q.size(3);
  double pairs = 0;  // per batch row
  for (int64_t w : window)
    for (int64_t j = position; j < position + t; ++j) pairs += double(w > 0 ? std::min(j + 1, w) : j + 1);
  const double es = double(dtype_size(q.dtype()));
  Cost c;
  c.kind = profiler::Kind::attention;
  c.half = half(q.dtype());
  c.flops = 4.0 * double(D) * double(B) * pairs;
  c.bytes = 2.0 * double(B) * pairs * double(D) * es + (writes_kv ? 4 : 2) * bytes_of(q);
  c.shape = shape_str(q.shape());
  return c;
}

Cost layernorm(const Tensor& x, bool bias, DType stats_dtype) {
  const int64_t C = x.size(-1), N = x.numel() / std::max<int64_t>(1, C);
  const double es = double(dtype_size(x.dtype()));
  Cost c;
  c.flops = kLayerNormFwd * n_of(x);
  // x, weight (, bias) -> y, mean, rstd
  c.bytes = 2 * bytes_of(x) + double(C) * es * (bias ? 2 : 1) + 2.0 * double(N) * double(dtype_size(stats_dtype));
  c.shape = shape_str(x.shape());
  return c;
}

Cost layernorm_backward(const Tensor& x, DType stats_dtype, bool dx, bool dw, bool db) {
  const int64_t C = x.size(-1), N = x.numel() / std::max<int64_t>(1, C);
  const double es = double(dtype_size(x.dtype()));
  Cost c;
  c.flops = kLayerNormBwd * n_of(x);
  // grad, x, weight, mean, rstd -> dx, dweight, dbias
  c.bytes = 2 * bytes_of(x) + double(C) * es + 2.0 * double(N) * double(dtype_size(stats_dtype)) +
            (dx ? bytes_of(x) : 0.0) + double(C) * es * ((dw ? 1 : 0) + (db ? 1 : 0));
  c.shape = shape_str(x.shape());
  return c;
}

Cost add_layernorm(const Tensor& x, bool bias, DType stats_dtype) {
  Cost c = layernorm(x, bias, stats_dtype);  // x -> y: h read, out written
  c.flops += n_of(x);                        // the add
  c.bytes += 2 * bytes_of(x);                // y read, h written
  return c;
}

Cost add_layernorm_backward(const Tensor& h, DType stats_dtype, bool dx, bool dw, bool db, bool residual) {
  Cost c = layernorm_backward(h, stats_dtype, dx, dw, db);
  if (dx && residual) c.flops += n_of(h), c.bytes += bytes_of(h);
  return c;
}

Cost gelu(const Tensor& x) { return elementwise({&x}, x.shape(), x.dtype(), kGeluFwd); }
Cost gelu_backward(const Tensor& x) { return elementwise({&x, &x}, x.shape(), x.dtype(), kGeluBwd); }  // grad, x -> dx
Cost softmax(const Tensor& x) { return elementwise({&x}, x.shape(), x.dtype(), kSoftmaxFwd); }
Cost softmax_backward(const Tensor& y) { return elementwise({&y, &y}, y.shape(), y.dtype(), kSoftmaxBwd); }

Cost cross_entropy(const Tensor& logits, const Tensor& targets, DType lse_dtype, bool fused) {
  Cost c;
  c.flops = (kCrossEntropyFwd + (fused ? kCrossEntropyBwd : 0)) * n_of(logits);
  // logits, targets -> lse (N), loss (one f32); fused: and dlogits in the logits' dtype (the second
  // read of a row hits L2)
  c.bytes = bytes_of(logits) + bytes_of(targets) + bytes_of({targets.numel()}, lse_dtype) + 4 +
            (fused ? bytes_of(logits) : 0);
  c.shape = shape_str(logits.shape());
  return c;
}

Cost cross_entropy_backward(const Tensor& logits, const Tensor& targets, DType lse_dtype, DType grad_dtype,
                            bool fused) {
  Cost c;
  c.shape = shape_str(logits.shape());
  if (fused) {  // the forward wrote dlogits: each block reads the gradient, finds it promised, stops
    c.bytes = 4;
    return c;
  }
  c.flops = kCrossEntropyBwd * n_of(logits);
  // logits, targets, lse -> dlogits
  c.bytes = bytes_of(logits) + bytes_of(targets) + bytes_of({targets.numel()}, lse_dtype) +
            bytes_of(logits.shape(), grad_dtype);
  return c;
}

Cost embedding(const Tensor& ids, const Tensor& weight) {
  const double rows = double(ids.numel()) * double(weight.size(1)) * double(dtype_size(weight.dtype()));
  Cost c;
  c.bytes = bytes_of(ids) + 2 * rows;  // ids, the gathered rows -> out
  c.shape = shape_str(ids.shape()) + "x" + shape_str(weight.shape());
  return c;
}

Cost embedding_backward(const Tensor& grad, const Tensor& ids, const Shape& weight) {
  Cost c;
  c.flops = n_of(grad);  // one add per gradient element
  // zero the table, then read ids and grad and add into the rows they name (read + write)
  c.bytes = bytes_of(weight, grad.dtype()) + bytes_of(ids) + 3 * bytes_of(grad);
  c.shape = shape_str(grad.shape()) + "->" + shape_str(weight);
  return c;
}

Cost elementwise(const std::vector<const Tensor*>& inputs, const Shape& out, DType dtype, double per_element) {
  Cost c;
  for (const Tensor* t : inputs) c.bytes += bytes_of(*t);
  c.bytes += bytes_of(out, dtype);
  c.flops = per_element * double(numel_of(out));
  c.half = half(dtype);
  c.shape = shape_str(out);
  return c;
}

Cost reduction(const Tensor& x, const Shape& out) {
  Cost c;
  c.flops = n_of(x);
  c.bytes = bytes_of(x) + bytes_of(out, x.dtype());
  c.shape = shape_str(x.shape()) + "->" + shape_str(out);
  return c;
}

Cost adamw(double n, DType param_dtype, DType grad_dtype, bool master) {
  Cost c;
  c.flops = 12 * n;
  const double p = double(dtype_size(param_dtype)), g = double(dtype_size(grad_dtype));
  // read grad, m, v, the weight (f32 master when kept); write m, v, the weight (and the copy)
  c.bytes = n * (g + 4 + 4 + 2 * (master ? 4 : p) + 4 + 4 + (master ? p : 0));
  c.shape = fmt::format("[{}]", int64_t(n));
  return c;
}

}  // namespace keel::op_costs
