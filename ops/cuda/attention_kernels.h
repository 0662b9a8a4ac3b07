// Which CUDA attention kernels run: the one place that reads KEEL_ATTENTION_KERNEL.
//
//   mma  (default) FlashAttention-2's design on the PTX tensor-core instructions
//        (ops/cuda/attention_mma_forward.cu, attention_mma_backward.cu): S, P and O stay in
//        registers. bf16 and f16 only: mma.sync has no f32 inputs.
//   wmma the first kernels (attention_forward.cu, attention_backward.cu): WMMA fragments with
//        S, P and O through shared memory, and plain f32 FMAs for f32.
//
// f32 always takes the second set (its exact FMA path: TF32 tensor cores would miss f32's
// 1e-5 parity), whatever the variable says. The default is mma because it is the design that
// can reach FlashAttention-2's speed; wmma stays selectable until a GPU has measured both
// (docs/gpu-benchmarks.md). Read at every call, so a test or benchmark can switch between calls.
// Plain C++, so tests and benchmarks include it in any build.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace keel::cuda {

enum class AttentionKernels { mma, wmma };

inline const char* attention_kernels_name(AttentionKernels k) { return k == AttentionKernels::mma ? "mma" : "wmma"; }

// The kernels a call on tensors of `dtype` runs. ConfigError for a value other than mma or wmma.
inline AttentionKernels attention_kernels(DType dtype) {
  const char* v = std::getenv("KEEL_ATTENTION_KERNEL");
  AttentionKernels k = AttentionKernels::mma;
  if (v && *v) {
    if (std::strcmp(v, "wmma") == 0) k = AttentionKernels::wmma;
    else if (std::strcmp(v, "mma") != 0)
      throw ConfigError("KEEL_ATTENTION_KERNEL", std::string("unknown attention kernels '") + v + "'",
                        "set KEEL_ATTENTION_KERNEL to mma (the default) or wmma, or unset it");
  }
  return dtype == DType::f32 ? AttentionKernels::wmma : k;
}

}  // namespace keel::cuda
