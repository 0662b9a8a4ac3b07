// The GEMM engine behind the emulated cuBLAS (cublas.cpp) and cuBLASLt (cublaslt.cpp).
//
// Both libraries reduce to one computation, D = alpha op(A) op(B) + beta C (+ bias), column-major,
// over a strided batch; they differ only in how the arguments arrive and which ones they reject.
// Each front end validates with its own library's rules and fills a GemmArgs; gemm() then computes
// on the host (device memory is host memory in the emulated build). Internal to core/cuda/emu.
#pragma once

#include <cublas_api.h>

#include <cstddef>
#include <cstdint>

namespace keel::cuda::emu::blas {

// What the compute type does to the inputs before the multiply: the GPU's "fast" f32 compute
// types (and the TF32 math mode) down-convert f32 operands for the tensor cores.
enum class InputRounding { none, tf32, f16, bf16 };

// A column-major operand as stored: matrix b of the batch starts at p + b * stride (elements);
// op says whether the stored matrix is op(X) itself (N) or its transpose (T; C is T for reals).
struct GemmInput {
  const void* p = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1, stride = 0;
};

// A column-major (m, n) output or accumulator input.
struct GemmOutput {
  const void* p = nullptr;  // written through const_cast for D: one struct serves C and D
  cudaDataType_t type = CUDA_R_32F;
  int64_t ld = 1, stride = 0;
};

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  GemmInput a, b;              // op(a) is (m, k), op(b) is (k, n)
  GemmOutput c, d;             // c is read only when beta != 0; d may alias c (same layout)
  const void* bias = nullptr;  // length m, added to every column of d; nullptr: none
  cudaDataType_t bias_type = CUDA_R_32F;
  // cuBLASLt's GELU epilogues: aux (when aux.p is set) receives the value before the GELU
  // (product plus bias, rounded to aux.type), then d = gelu(value) in the tanh form.
  bool gelu = false;
  GemmOutput aux;
  // cuBLASLt's DGELU epilogue: aux is an input instead, the GELU's input, and d = value *
  // gelu'(aux) (gelu_tanh_grad).
  bool dgelu = false;
  InputRounding rounding = InputRounding::none;
};

// GPT-2's GELU in f32, the tanh form keel's kernels use (ops/cuda/gelu.cu):
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
float gelu_tanh(float v);
// Its derivative at v, as keel's gelu backward kernel computes it (ops/cuda/gelu.cu).
float gelu_tanh_grad(float v);

// f32, f16 and bf16: the element types the engine reads and writes.
bool is_supported_type(cudaDataType_t t);
size_t type_size(cudaDataType_t t);  // 0 for a type the engine does not know

// Runs the whole batch. Arguments must already be valid (the front ends check them).
void gemm(const GemmArgs& g);

// Handles live until destroyed, like the library's own: these keep a handle the program never
// destroys reachable (keel keeps one per device for the life of the process), so that
// LeakSanitizer does not report it.
void track_handle(const void* handle);
void untrack_handle(const void* handle);

}  // namespace keel::cuda::emu::blas
