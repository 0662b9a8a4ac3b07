// The CUDA kernels behind the op front ends, as plain C++ (no CUDA headers), so that the
// device-agnostic front ends in ops/*.cpp can call them. Only defined when keel is built with
// CUDA: callers guard their calls with `#ifdef KEEL_WITH_CUDA`.
//
// Conventions, the same for every function here:
//  - tensors are on one CUDA device; no autograd (the front ends record nodes);
//  - floating dtypes f32, bf16, f16 (f64 raises DTypeError: it exists for CPU gradient
//    checks); bf16/f16 are storage types, all arithmetic and every reduction runs in f32;
//  - "contiguous" arguments are the front end's job; functions that accept strided inputs
//    say so. Outputs are freshly allocated and contiguous unless passed in.
//  - everything is queued on the device's one compute stream (core/cuda/check.h), except
//    where a function says it waits (cross_entropy_forward, embedding checks on the host).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cpu/elementwise.h"  // BinaryOp, UnaryOp: one list of operations for both devices
#include "ops/cpu/reduce.h"       // Reduce

namespace keel::cuda {

// ---- elementwise (elementwise.cu) ----
// out (S) = a op b, a and b any strides, broadcast to S (NumPy rules); out contiguous (S).
void binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
// out (S) = op(x (S)), x any strides; `s` is the scalar of add_scalar / mul_scalar.
void unary(cpu::UnaryOp op, const Tensor& x, Tensor& out, double s = 0.0);
// g, x (S) -> g * (x > 0) (S): relu's backward.
Tensor relu_backward(const Tensor& g, const Tensor& x);

// ---- reductions (reduce.cu) ----
// x (outer, n, inner) contiguous -> out (outer, inner) in x's dtype; for max also the
// argmax (outer, inner) i64 (the first maximum wins, as on the CPU). Sums accumulate in f32.
void reduce_dim(cpu::Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax = nullptr);
// g (outer, inner), idx (outer, inner) i64 -> gx (outer, n, inner) = g at the argmax, else 0.
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx);

// ---- embedding (embedding.cu) ----
// weight (V, C) contiguous, ids (N) contiguous device tensor, already range-checked -> out (N, C).
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out);
// g (N, C) contiguous on the device, ids_host (N) on the CPU -> gw (V, C) += the rows of g,
// summed per id in position order (deterministic: no atomics; see embedding.cu).
void embedding_backward(const Tensor& g, const Tensor& ids_host, Tensor& gw);

// ---- dropout (dropout.cu) ----
// mask (N) contiguous <- keep_scale where philox_uniform(key, base, i) > p, else 0: the CPU's mask.
void dropout_mask(Tensor& mask, uint64_t key, uint64_t base, float p, double keep_scale);

// ---- layernorm (layernorm.cu) ----
// x (N, C), weight (C), bias (C) or undefined -> y (N, C); mean, rstd (N) f32 are filled in.
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& mean,
                         Tensor& rstd);
// grad, x (N, C), weight (C), mean, rstd (N) f32 -> dx (N, C), dweight (C), dbias (C), each only
// when asked for (weight may be undefined when need_x is false).
void layernorm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, bool need_x, bool need_weight, bool need_bias, Tensor& dx,
                        Tensor& dweight, Tensor& dbias);

// ---- GELU, tanh form (gelu.cu) ----
// x (N) -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) -> dx (N)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
// Fused bias + GELU for the MLP (nn may use it): x (R, C), bias (C) -> gelu(x + bias) (R, C).
Tensor bias_gelu_forward(const Tensor& x, const Tensor& bias);
// grad, x (R, C), bias (C) -> dx (R, C) = grad * gelu'(x + bias); dbias (C) = dx summed over
// rows, when need_bias.
Tensor bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, bool need_bias, Tensor& dbias);

// ---- softmax (softmax.cu) ----
// x (O, n, I) contiguous around dim (n = x.shape[dim]) -> y, same shape; log picks log_softmax.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
// y, grad (same shape, contiguous) -> dx
Tensor softmax_backward(const Tensor& y, const Tensor& grad, int64_t dim, bool log);

// ---- cross-entropy fused with log-softmax (cross_entropy.cu) ----
// logits (N, V), targets (N) i32/i64, both contiguous -> loss [] in logits' dtype; lse (N) f32
// and the number of non-ignored rows are filled in. Waits for the device: the targets are
// checked on the host (IndexError as on the CPU) and `count` is needed there.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& lse,
                             int64_t& count);
// logits (N, V), targets (N), lse (N), grad [] on the device -> dlogits (N, V) =
// (softmax - onehot) * grad / count; zero rows where the target is ignore_index.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              int64_t count, const Tensor& grad);

// ---- matmul and linear through cuBLAS / cuBLASLt (matmul.cu) ----
// Same contracts as the cpu:: functions of ops/matmul.h (strided operands accepted).
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape);
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight);
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x);
Tensor linear_grad_bias(const Tensor& grad);

}  // namespace keel::cuda
