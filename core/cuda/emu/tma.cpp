// TMA on the emulated GPU: the driver's cuTensorMapEncodeTiled, which the emulated runtime hands
// out through cudaGetDriverEntryPointByVersion, the boxes cp.async.bulk.tensor brings into
// shared memory (issued and completed on an mbarrier in mbarrier.cpp, landed here), and the boxes
// it stores from shared memory into the tensor (issued in bulk groups in bulk_group.cpp, written
// here).
//
// The map: CUDA's 128-byte CUtensorMap is opaque; the emulated driver writes its own fields into
// it behind a tag, and a kernel handed anything else fails at the copy. The encoder checks what
// the driver documents (cuda.h, cuTensorMapEncodeTiled) and returns CUDA_ERROR_INVALID_VALUE
// where it would; of its options the emulator models the ones keel uses: rank 1 to 5, element
// strides of 1, no interleave, swizzle none, 32, 64 or 128 bytes, zero or NaN for elements outside
// the tensor.
//
// A box lands row by row (dimension 0 contiguous, the box packed in shared memory), each 16-byte
// chunk at its shared address with the swizzle applied: bits 4.. of the address XOR bits 7.. (as
// many as the width has chunks), the layout wgmma's descriptor of the same swizzle reads. A
// swizzled box's rows are the swizzle's width (a narrower row would scatter chunks past the box).
// A store reads the same layout back and writes only the elements inside the tensor.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <vector>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/ptx.h"

namespace keel::emu::detail {

namespace {

constexpr uint64_t kMapTag = 0x6b65656c2d746d61ull;  // "keel-tma"

// What the emulated driver stores in a CUtensorMap.
struct EncodedMap {
  uint64_t tag;
  const unsigned char* base;
  uint8_t rank, esize, swizzle_code, nan_fill;
  uint64_t dims[5], strides[4];
  uint16_t box[5];
};
static_assert(sizeof(EncodedMap) <= sizeof(CUtensorMap), "the emulated map fits CUDA's");

int element_bytes(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return 0;  // the packed types: not modelled
  }
}

uint32_t swizzle_width(uint32_t code) { return code == 0 ? 0 : 16u << code; }  // 32, 64, 128 bytes

CUresult CUDAAPI encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                              const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                              const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill fill) {
  const int esize = element_bytes(type);
  if (!map || esize == 0 || rank < 1 || rank > 5 || reinterpret_cast<uintptr_t>(base) % 16 != 0 ||
      interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || swizzle > CU_TENSOR_MAP_SWIZZLE_128B)
    return CUDA_ERROR_INVALID_VALUE;
  EncodedMap e{};
  e.tag = kMapTag, e.base = static_cast<const unsigned char*>(base), e.rank = uint8_t(rank), e.esize = uint8_t(esize);
  e.swizzle_code = uint8_t(swizzle), e.nan_fill = fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32) || box[i] == 0 || box[i] > 256 || element_strides[i] != 1)
      return CUDA_ERROR_INVALID_VALUE;
    if (i > 0 && (strides[i - 1] % 16 != 0 || strides[i - 1] >= (uint64_t{1} << 40))) return CUDA_ERROR_INVALID_VALUE;
    e.dims[i] = dims[i], e.box[i] = uint16_t(box[i]);
    if (i > 0) e.strides[i - 1] = strides[i - 1];
  }
  const uint32_t row = box[0] * uint32_t(esize), width = swizzle_width(e.swizzle_code);
  if (row % 16 != 0 || (width && row > width)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(map, 0, sizeof(CUtensorMap));
  std::memcpy(map, &e, sizeof e);
  return CUDA_SUCCESS;
}

}  // namespace

TmaBox decode_tensor_map(const Block& b, const void* map, const std::source_location& where) {
  EncodedMap e;
  std::memcpy(&e, map, sizeof e);
  if (e.tag != kMapTag)
    fail(b, fmt::format("cp.async.bulk.tensor ({}:{}) with a tensor map at {} that cuTensorMapEncodeTiled did not "
                        "encode", where.file_name(), where.line(), map),
         "encode maps on the host (keel::cuda::tensor_map) and pass them as const __grid_constant__ CUtensorMap");
  TmaBox box;
  box.base = e.base, box.rank = e.rank, box.esize = e.esize, box.swizzle = swizzle_width(e.swizzle_code);
  box.nan_fill = e.nan_fill;
  for (int i = 0; i < box.rank; ++i) {
    box.dims[i] = e.dims[i], box.box[i] = e.box[i];
    box.strides[i] = i == 0 ? e.esize : e.strides[i - 1];
  }
  if (box.swizzle && box.box[0] * box.esize != box.swizzle)
    fail(b, fmt::format("cp.async.bulk.tensor ({}:{}) of rows of {} bytes with the {}-byte swizzle, which the emulator "
                        "does not model", where.file_name(), where.line(), box.box[0] * box.esize, box.swizzle),
         "make a swizzled box's rows as wide as its swizzle (64 bf16 for 128 bytes)");
  return box;
}

namespace {

// Where row r of the box (its rows numbered across dimensions 1.., the innermost fastest) starts
// in the tensor: the element at coordinate 0 of dimension 0; null when the row is outside it.
const unsigned char* row_start(const TmaBox& box, uint32_t r) {
  const unsigned char* at = box.base;
  for (int d = 1; d < box.rank && at; ++d) {
    const int64_t i = int64_t(box.coords[d]) + r % box.box[d];
    r /= box.box[d];
    at = i >= 0 && uint64_t(i) < box.dims[d] ? at + uint64_t(i) * box.strides[d] : nullptr;
  }
  return at;
}

// Calls f(offset in the box's shared-memory image, element's address in the tensor or null when
// outside it) for every element of the box: rows packed, each 16-byte chunk at its swizzled address.
template <typename F>
void for_each_element(const TmaBox& box, uint32_t bytes, F f) {
  const uint32_t row = box.box[0] * box.esize, rows = bytes / row;
  for (uint32_t r = 0; r < rows; ++r) {
    const unsigned char* src = row_start(box, r);
    for (uint32_t c = 0; c < row / 16; ++c) {
      uint32_t addr = box.dst_addr + r * row + 16 * c;
      if (box.swizzle) addr ^= (addr >> 7 & (box.swizzle / 16 - 1)) << 4;
      for (uint32_t k = 0; k < 16 / box.esize; ++k) {
        const int64_t x = int64_t(box.coords[0]) + (16 * c) / box.esize + k;
        const bool inside = src && x >= 0 && uint64_t(x) < box.dims[0];
        f(addr - box.dst_addr + k * box.esize, inside ? src + uint64_t(x) * box.esize : nullptr);
      }
    }
  }
}

}  // namespace

void land_box(void* dst, const TmaBox& box, uint32_t bytes) {
  // Built whole, then written with one memcpy: ThreadSanitizer sees the landing as one write. The
  // image is this landing's own: a buffer kept between landings would be shared by the fibers
  // (CUDA threads) that land boxes, which ThreadSanitizer rightly reports as a race.
  std::vector<unsigned char> image(bytes, 0);
  for_each_element(box, bytes, [&](uint32_t at, const unsigned char* src) {
    if (src)
      std::memcpy(image.data() + at, src, box.esize);
    else if (box.nan_fill)
      std::memset(image.data() + at, 0xff, box.esize);
  });
  std::memcpy(dst, image.data(), bytes);
}

void store_box(const void* src, const TmaBox& box, uint32_t bytes) {
  const auto* from = static_cast<const unsigned char*>(src);
  // The map's tensor is the one the kernel writes through it (maps hold const addresses).
  for_each_element(box, bytes, [&](uint32_t at, const unsigned char* dst) {
    if (dst) std::memcpy(const_cast<unsigned char*>(dst), from + at, box.esize);
  });
}

}  // namespace keel::emu::detail

// The runtime's door to the driver: the emulated driver has the one entry point keel asks for.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  const bool known = symbol && std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  if (fn) *fn = known ? reinterpret_cast<void*>(&keel::emu::detail::encode_tiled) : nullptr;
  if (status) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
