// TMA tensor maps: how a kernel's cp.async.bulk.tensor (core/cuda/ptx_sm90.cuh, tma_load) finds
// a box of a tensor in global memory. A map is CUDA's CUtensorMap, encoded on the host by the
// driver's cuTensorMapEncodeTiled, which keel reaches through the runtime
// (cudaGetDriverEntryPointByVersion) so that no driver library is linked; on the emulated GPU the
// runtime hands out its twin (core/cuda/emu/tma.cpp). A kernel takes the map as a
// `const __grid_constant__ CUtensorMap` parameter and passes its address to tma_load.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace keel::cuda {

// The shared-memory swizzle a box is written with (the 16-byte chunk index XOR the row index
// within 32-, 64- or 128-byte rows: what wgmma's descriptors of the same name read).
enum class TmaSwizzle { none, b32, b64, b128 };

// A map of a tensor at `base` (16-byte aligned) of dtype f32, bf16 or f16, with dims[i] elements
// along dimension i, innermost first (at most 5), strides[i - 1] bytes between consecutive
// indices of dimension i (multiples of 16); each copy brings a box of box[i] elements (at most
// 256; box[0] of 16-byte multiples, at most the swizzle's width). Elements outside the tensor
// arrive as zeros. A map the driver refuses is a CudaError naming it.
CUtensorMap tensor_map(const void* base, DType dtype, const std::vector<uint64_t>& dims,
                       const std::vector<uint64_t>& strides, const std::vector<uint32_t>& box, TmaSwizzle swizzle);

}  // namespace keel::cuda
