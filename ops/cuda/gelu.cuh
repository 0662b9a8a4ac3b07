// GPT-2's GELU (tanh form) and its derivative in f32 on the device: the CPU kernel's formulas
// (ops/cpu/gelu.cpp), shared by gelu's kernels (ops/cuda/gelu.cu) and the fused decode kernel
// that ends in one (ops/cuda/add_layernorm_linear.cu).
#pragma once

namespace keel::cuda::dev {

constexpr float kGeluAlpha = 0.044715f;
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)

// 0.5 v (1 + tanh(beta (v + alpha v^3)))
__device__ __forceinline__ float gelu_tanh(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluBeta * (v + kGeluAlpha * v * v * v)));
}
// with t = tanh(beta (v + alpha v^3)): gelu'(v) = 0.5 (1 + t) + 0.5 v (1 - t^2) beta (1 + 3 alpha v^2)
__device__ __forceinline__ float gelu_tanh_grad(float v) {
  const float t = tanhf(kGeluBeta * (v + kGeluAlpha * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluAlpha * v * v);
}

}  // namespace keel::cuda::dev
