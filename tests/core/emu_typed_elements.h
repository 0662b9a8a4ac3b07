// Element i of host storage holding one CUDA data type (f32, f16 or bf16), as f32: how the tests
// of the emulated cuBLAS and cuBLASLt (test_emu_libraries.cpp, test_emu_cublaslt_gelu.cpp) read
// and write their matrices and vectors. Only the emulated build includes it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstdint>

namespace keel::testing {

inline float typed_at(cudaDataType_t type, const void* data, int64_t i) {
  if (type == CUDA_R_16F) return __half2float(static_cast<const __half*>(data)[i]);
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
  return static_cast<const float*>(data)[i];
}

// Rounds v to the type (to nearest), as a kernel storing an f32 result would.
inline void typed_put(cudaDataType_t type, void* data, int64_t i, float v) {
  if (type == CUDA_R_16F)
    static_cast<__half*>(data)[i] = __float2half_rn(v);
  else if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(data)[i] = v;
}

}  // namespace keel::testing
