// Element conversions and dtype dispatch shared by every CUDA kernel in keel (ops/cuda,
// optim/cuda): half types are storage only, arithmetic is f32 (or f64 where the optimizer asks
// for it). One copy, so every kernel rounds the same way (round to nearest even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace keel::cuda {

template <typename T> __host__ __device__ __forceinline__ float to_f32(T v) { return static_cast<float>(v); }
template <> __host__ __device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __host__ __device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T> __host__ __device__ __forceinline__ T from_f32(float v) { return static_cast<T>(v); }
template <> __host__ __device__ __forceinline__ __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }
template <> __host__ __device__ __forceinline__ __half from_f32(float v) { return __float2half_rn(v); }

// Floating keel dtype -> its CUDA storage type: f.template operator()<T>() with T = float,
// __nv_bfloat16 or __half, and double when AllowF64 (the optimizer's f64 test parameters).
// Anything else raises DTypeError naming `op`.
template <bool AllowF64 = false, typename F>
void visit_cuda_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::bf16: return f.template operator()<__nv_bfloat16>();
    case DType::f16: return f.template operator()<__half>();
    case DType::f64:
      if constexpr (AllowF64) return f.template operator()<double>();
      break;
    default:
      break;
  }
  throw DTypeError(op, std::string("CUDA kernels compute in f32, bf16 or f16") + (AllowF64 ? " (or f64)" : "") +
                           ", got " + dtype_name(t),
                   "f64 is for gradient checks on the CPU; convert with .to(DType::f32)");
}

}  // namespace keel::cuda
