// Internal to ops/cuda: what matmul.cu (cuBLAS) and linear_lt.cu (cuBLASLt) share.
//
// Handles: one cuBLAS and one cuBLASLt handle per device, made on first use, bound to keel's
// stream of that device, sharing one 32 MiB workspace from keel's caching allocator (kept for
// the life of the process). keel issues its work from one host thread per device.
//
// Layouts: BLAS takes a matrix whose rows or columns are unit-stride, with a leading dimension
// (ops/cpu/matmul.cpp maps onto Eigen by the same rule); anything else is packed first.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace keel::cuda::blas {

inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct Handles {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
};

// The device's handles (made on the first call; DeviceError for an index past 63).
Handles& handles(int device);

// The cuBLAS type of f32, bf16 and f16; DTypeError naming `op` for the others.
cudaDataType_t cuda_type(DType t, const char* op);

// v as one cuBLAS call's int; ShapeError naming `what` when it does not fit.
int as_int(int64_t v, const char* what);

// How a (rows, cols) matrix with strides (rs, cs) maps onto BLAS: row-major with leading dim
// ld >= cols, or column-major with ld >= rows; ok false when neither.
struct Layout {
  bool ok = false;
  bool row_major = true;
  int64_t ld = 1;
};
Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs);
// t (..., R, C): the layout of its last two dims.
Layout layout_of(const Tensor& t);
// t (..., R, C) as it is when BLAS can take its matrices, else a packed copy.
Tensor mappable(const Tensor& t);
// t (..., R, C) -> (..., C, R), a view.
Tensor transpose_last(const Tensor& t);
// t (..., C) -> (R, C): a view when the leading dims merge into one of a single stride, else
// a packed copy (ops/cpu/matmul.cpp's rows2d).
Tensor rows2d(const Tensor& t);
// The largest power of two, up to 256, dividing p's address: what cuBLASLt may assume.
uint32_t alignment_of(const void* p);

}  // namespace keel::cuda::blas
