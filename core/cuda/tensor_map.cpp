// Encoding TMA tensor maps (tensor_map.h) through the driver entry point the runtime hands out.
#include "core/cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>

#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/error.h"

namespace keel::cuda {

namespace {

CUtensorMapDataType data_type(DType d) {
  switch (d) {
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    default: throw CudaError("tensor_map", fmt::format("no TMA copies of {} here", dtype_name(d)), "use f32, bf16 or f16");
  }
}

CUtensorMapSwizzle swizzle_mode(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::b32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::b64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::b128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    KEEL_CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !p)
      throw CudaError("tensor_map", "the CUDA driver has no cuTensorMapEncodeTiled",
                      "TMA needs a CUDA 12 driver or newer");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tensor_map(const void* base, DType dtype, const std::vector<uint64_t>& dims,
                       const std::vector<uint64_t>& strides, const std::vector<uint32_t>& box, TmaSwizzle swizzle) {
  const size_t rank = dims.size();
  if (rank < 1 || rank > 5 || strides.size() + 1 != rank || box.size() != rank)
    throw CudaError("tensor_map", fmt::format("{} dims, {} strides and {} box sizes", rank, strides.size(), box.size()),
                    "give 1 to 5 dims, one stride fewer, and a box size per dim");
  const std::vector<uint32_t> element_strides(rank, 1);
  CUtensorMap map{};
  detail::count_tensor_map();
  const CUresult r = encoder()(&map, data_type(dtype), static_cast<cuuint32_t>(rank), const_cast<void*>(base),
                               dims.data(), strides.data(), box.data(), element_strides.data(),
                               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_mode(swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string d, s, b;
    for (size_t i = 0; i < rank; ++i)
      d += fmt::format("{}{}", i ? " " : "", dims[i]), b += fmt::format("{}{}", i ? " " : "", box[i]);
    for (uint64_t x : strides) s += fmt::format("{}{}", s.empty() ? "" : " ", x);
    throw CudaError("cuTensorMapEncodeTiled",
                    fmt::format("error {} for a {} tensor at {} of dims [{}], strides [{}] bytes, box [{}]",
                                static_cast<int>(r), dtype_name(dtype), base, d, s, b),
                    "base and strides 16-byte aligned, box sizes 1 to 256 with box[0] a multiple of 16 bytes and at "
                    "most the swizzle's width");
  }
  return map;
}

}  // namespace keel::cuda
