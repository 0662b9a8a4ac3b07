// The warp-wide half of wmma (wmma.h): the product of the tiles the 32 lanes hold, and the
// alignment rules of fragment loads and stores.
#include "core/cuda/emu/wmma.h"

#include <fmt/format.h>

#include "core/error.h"

namespace keel::emu::wmma_detail {

// Each lane's `in` is its na elements of A (M x K), nb of B (K x N) and nc of C (M x N), each in
// row-major order lane after lane (wmma.h's layout), so concatenating the lanes gives the tiles.
void mma_combine(const void* shape_p, const void* const in[32], void* const out[32], unsigned mask) {
  const MmaShape s = *static_cast<const MmaShape*>(shape_p);
  if (mask != 0xffffffffu) throw CudaError("emulated CUDA", "wmma::mma_sync needs all 32 lanes of the warp");
  const int na = s.m * s.k / 32, nb = s.k * s.n / 32, nc = s.m * s.n / 32;
  float A[512], B[512], C[512];  // every wmma shape has at most 512 elements per tile
  for (int l = 0; l < 32; ++l) {
    const float* p = static_cast<const float*>(in[l]);
    for (int i = 0; i < na; ++i) A[l * na + i] = p[i];
    for (int i = 0; i < nb; ++i) B[l * nb + i] = p[na + i];
    for (int i = 0; i < nc; ++i) C[l * nc + i] = p[na + nb + i];
  }
  for (int r = 0; r < s.m; ++r)
    for (int c = 0; c < s.n; ++c) {
      float acc = C[r * s.n + c];
      for (int k = 0; k < s.k; ++k) acc = __builtin_fmaf(A[r * s.k + k], B[k * s.n + c], acc);
      C[r * s.n + c] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    float* p = static_cast<float*>(out[l]);
    for (int i = 0; i < nc; ++i) p[i] = C[l * nc + i];
  }
}

void check_pointer(const void* p, long ldm, int elem_bytes, const char* what, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    throw CudaError("emulated CUDA",
                    fmt::format("{} ({}:{}): pointer {} is not 256-bit (32-byte) aligned", what, where.file_name(),
                                where.line(), p),
                    "CUDA requires wmma fragment pointers aligned to 32 bytes");
  if ((ldm * elem_bytes) % 16 != 0)
    throw CudaError("emulated CUDA",
                    fmt::format("{} ({}:{}): leading dimension {} elements of {} bytes is not a multiple of 16 bytes",
                                what, where.file_name(), where.line(), ldm, elem_bytes),
                    "CUDA requires ldm to be a multiple of 8 halves or 4 floats");
}

}  // namespace keel::emu::wmma_detail
