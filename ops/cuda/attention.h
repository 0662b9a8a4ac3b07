// The CUDA kernels of attention (ops/attention.h). ops/cpu/attention.h declares the very
// same functions for the other device; the front end ops/attention.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace keel::cuda {

// The kernels that run attention in bf16 and f16. mma: the mma.sync kernels (FlashAttention-2's
// way; every GPU from sm_80). sm90: on a GPU of compute capability 9.0 (H100, H200), the forward
// and backward run the warpgroup kernels (attention_sm90_forward.cu, _backward.cu,
// FlashAttention-3's way) where they take the shape; other GPUs and shapes keep mma. The choice is the process's:
// set_attention_kernel's, else the environment's KEEL_ATTENTION (mma or sm90; any other value is
// a ConfigError when attention first runs), else mma, the default until a GPU has run the sm90
// kernels' parity grid (docs/attention-kernels.md, section 6).
enum class AttentionKernel { mma, sm90 };
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

// set_attention_kernel for a scope (gpt2 train's --attention-kernel): the choice before it returns
// at its end.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(AttentionKernel kernel) : previous_(attention_kernel()) {
    set_attention_kernel(kernel);
  }
  ~AttentionKernelScope() { set_attention_kernel(previous_); }
  AttentionKernelScope(const AttentionKernelScope&) = delete;
  AttentionKernelScope& operator=(const AttentionKernelScope&) = delete;

 private:
  AttentionKernel previous_;
};

// Every tensor already allocated, one device; the (B, H, T, D) ones may be strided views whose D
// elements are adjacent (attention_packed's heads: no copies when every stride is a multiple of 16
// bytes, outputs must be so), lse packed; window has one entry per head
// (0 = full causal, w >= 1 = the last w keys); scale resolved (never 0 for D > 0); softcap 0 = none.
// CUDA also needs D a multiple of 8 up to 256 and H <= 128 (ShapeError otherwise), and keeps lse in f32.
// q, k, v (B, H, T, D) -> out (B, H, T, D), lse (B, H, T), max_logit (H) f32 (max |logit|),
// max_range (H) f32 (max over rows of max - min logit of the row's allowed keys), all overwritten
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                       double scale, double softcap, Tensor& out, Tensor& lse, Tensor& max_logit,
                       Tensor& max_range);
// q, k, v, out, dout (B, H, T, D), lse (B, H, T) -> dq, dk, dv (B, H, T, D), all overwritten
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const std::vector<int64_t>& window, double scale, double softcap,
                        Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace keel::cuda
