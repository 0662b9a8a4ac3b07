// The cuBLAS and cuBLASLt handles of each device and the layout helpers ops/cuda/blas.h declares.
#include "ops/cuda/blas.h"

#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/plan.h"

namespace keel::cuda::blas {

Handles& handles(int device) {
  static std::mutex mu;
  static std::unique_ptr<Handles> per_device[64];
  if (device < 0 || device >= 64) throw DeviceError("matmul", "device index " + std::to_string(device) + " too large");
  std::lock_guard<std::mutex> lock(mu);
  if (!per_device[device]) {
    auto b = std::make_unique<Handles>();
    KEEL_CHECK_CUDA(cudaSetDevice(device));
    KEEL_CHECK_CUBLAS(cublasCreate(&b->handle));
    KEEL_CHECK_CUBLAS(cublasSetStream(b->handle, detail::stream(device)));
    b->workspace = keel::allocate(Device::cuda(device), kWorkspaceBytes);
    KEEL_CHECK_CUBLAS(cublasSetWorkspace(b->handle, b->workspace, kWorkspaceBytes));
    KEEL_CHECK_CUBLAS(cublasSetMathMode(b->handle, CUBLAS_DEFAULT_MATH));  // no TF32 for f32
    KEEL_CHECK_CUBLAS(cublasLtCreate(&b->lt));
    per_device[device] = std::move(b);
  }
  return *per_device[device];
}

cudaDataType_t cuda_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default:
      throw DTypeError(op, std::string("CUDA matmul computes in f32, bf16 or f16, got ") + dtype_name(t),
                       "f64 is for gradient checks on the CPU; convert with .to(DType::f32)");
  }
}

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw ShapeError("matmul", std::string(what) + " = " + std::to_string(v) + " exceeds what one cuBLAS call takes");
  return static_cast<int>(v);
}

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols)) return {true, true, rows <= 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows)) return {true, false, cols <= 1 ? std::max<int64_t>(rows, 1) : cs};
  return {};
}
Layout layout_of(const Tensor& t) {
  const int64_t n = t.dim();
  return layout_of(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
}
Tensor mappable(const Tensor& t) { return layout_of(t).ok ? t : t.detach().contiguous(); }

Tensor transpose_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const size_t n = shape.size();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return t.as_strided(shape, strides, t.offset());
}

Tensor rows2d(const Tensor& t) {
  const int64_t C = t.size(-1);
  int64_t R = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) R *= t.shape()[d];
  std::vector<int64_t> lead(t.shape().begin(), t.shape().end() - 1), lead_strides(t.strides().begin(), t.strides().end() - 1);
  std::optional<int64_t> rs = plan::single_batch_stride(lead, lead_strides);
  if (rs && (R <= 1 || *rs != 0)) return t.as_strided({R, C}, {R <= 1 ? std::max<int64_t>(C, 1) : *rs, t.strides().back()}, t.offset());
  Tensor c = t.detach().contiguous();
  return c.as_strided({R, C}, {C, 1}, c.offset());
}

uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

}  // namespace keel::cuda::blas
