// The AdamW update of one element, shared by the CPU loop (optim/cpu/adamw.cpp) and the fused
// CUDA kernels (optim/cuda/adamw.cu) so that both run the same formula, each rounding spelled
// out (below). A CPU without FMA rounds its multiply-adds twice, so CUDA is compared with the
// CPU to a tolerance.
//
// PyTorch's AdamW (decoupled weight decay, bias correction), with t the parameter's step:
//   w <- w * (1 - lr * wd)                        (wd = 0 for parameters that are not decayed)
//   m <- b1 m + (1 - b1) g
//   v <- b2 v + (1 - b2) g^2
//   w <- w - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#pragma once

#include <math.h>

#include "core/fma.h"
#include "core/host_device.h"

namespace keel::optim {

// Overloads by hand: an unqualified sqrt(float) may resolve to the f64 ::sqrt on the host,
// which would make the CPU and the GPU round differently.
KEEL_HD inline float adamw_sqrt(float x) { return sqrtf(x); }
KEEL_HD inline double adamw_sqrt(double x) { return ::sqrt(x); }

// The per-step constants, computed once on the host in f64 from lr, betas and t.
struct AdamWScalars {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double decay = 1.0;        // 1 - lr * wd
  double step_size = 0.0;    // lr / (1 - b1^t)
  double bc2_sqrt = 1.0;     // sqrt(1 - b2^t)
  // Every gradient element times grad_scale as the step reads it, rounded to the gradient's
  // dtype as optim::scale_ would leave it there: the clip's factor, applied without a pass of its
  // own over the gradients (DataParallelOptimizer::step). The same for all of a step's tensors.
  double grad_scale = 1.0;
};

// The same constants in the compute type C (f32 for f32/bf16/f16 parameters, f64 for f64).
// grad_scale in both of scale_'s types: f32 for f32/bf16/f16 gradients, f64 for f64 ones. The
// kernels always multiply: times 1 and back to the gradient's dtype gives every value back
// exactly (NaN stays NaN), so there is no branch and the unscaled step keeps its bits.
template <typename C>
struct AdamWCoeffs {
  C beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay, step_size, bc2_sqrt;
  float grad_scale32;
  double grad_scale64;
  AdamWCoeffs() = default;  // for the multi-tensor kernel, which sets the per-tensor three itself
  explicit AdamWCoeffs(const AdamWScalars& s)
      : beta1(C(s.beta1)), one_minus_beta1(C(1.0 - s.beta1)), beta2(C(s.beta2)), one_minus_beta2(C(1.0 - s.beta2)),
        eps(C(s.eps)), decay(C(s.decay)), step_size(C(s.step_size)), bc2_sqrt(C(s.bc2_sqrt)),
        grad_scale32(float(s.grad_scale)), grad_scale64(s.grad_scale) {}
};

KEEL_BEGIN_DEVICE_VARIANT

#if KEEL_DEVICE_CODE
// On the GPU each rounding is spelled out. nvcc fuses a product into a following sum (an FMA),
// and in `b1 m + (1 - b1) g` either product can be the fused one: on an H100 the multi-tensor
// kernel and the per-tensor one chose differently, so one step gave f32 and f64 parameters
// different bits depending on the kernel. Intrinsics are never fused, so every kernel that calls
// adamw_update rounds the same way.
__device__ inline float adamw_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double adamw_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float adamw_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ inline double adamw_fma(double a, double b, double c) { return __fma_rn(a, b, c); }
__device__ inline float adamw_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double adamw_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float adamw_add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double adamw_add(double a, double b) { return __dadd_rn(a, b); }
#else
// On the host the same roundings, for the same reason: the CPU loop is vectorized with a scalar
// remainder, and an element's step must not depend on which of the two takes it (where a ZeRO-1
// shard begins), whatever products a compiler would choose to fuse in each. With the multiply-adds
// spelled as keel::fmadd (core/fma.h) nothing is left to fuse; where the CPU has FMA, the update
// rounds as the GPU's does.
template <typename C>
inline C adamw_mul(C a, C b) { return a * b; }
template <typename C>
inline C adamw_fma(C a, C b, C c) { return fmadd(a, b, c); }
template <typename C>
inline C adamw_div(C a, C b) { return a / b; }
template <typename C>
inline C adamw_add(C a, C b) { return a + b; }
#endif

// w (master weight), m, v updated in place from gradient g.
template <typename C>
KEEL_HD inline void adamw_update(C g, C& w, C& m, C& v, const AdamWCoeffs<C>& k) {
  w = adamw_mul(w, k.decay);
  m = adamw_fma(k.beta1, m, adamw_mul(k.one_minus_beta1, g));
  v = adamw_fma(k.beta2, v, adamw_mul(adamw_mul(k.one_minus_beta2, g), g));
  const C denom = adamw_add(adamw_div(adamw_sqrt(v), k.bc2_sqrt), k.eps);
  w = adamw_fma(-k.step_size, adamw_div(m, denom), w);
}

KEEL_END_DEVICE_VARIANT

}  // namespace keel::optim
