// The warp-wide halves of the PTX twins (ptx.h): the mma.sync product over the 32 lanes'
// fragments and ldmatrix's exchange of row values, plus the operand checks, each in the PTX
// ISA's terms.
#include "core/cuda/emu/ptx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <bit>

#include "core/cuda/emu/gpu_model.h"
#include "core/error.h"

namespace keel::emu::ptx {

namespace {

float element(uint32_t reg, int half, MmaInput input) {
  const auto bits = static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu);
  if (input == MmaInput::bf16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

std::string at(const std::source_location& w) { return fmt::format("{}:{}", w.file_name(), w.line()); }

}  // namespace

// D = A B + C for the m16n8k16 tiles the 32 lanes hold, in the layouts of ptx.h's header.
void mma_combine(const void* input_p, const void* const in[32], void* const out[32], unsigned mask) {
  if (mask != 0xffffffffu) throw CudaError("emulated CUDA", "mma.sync.aligned needs all 32 lanes of the warp");
  const MmaInput input = *static_cast<const MmaInput*>(input_p);
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const auto* op = static_cast<const MmaOperands*>(in[l]);
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = element(op->a[0], e, input);
      A[g + 8][2 * t + e] = element(op->a[1], e, input);
      A[g][2 * t + 8 + e] = element(op->a[2], e, input);
      A[g + 8][2 * t + 8 + e] = element(op->a[3], e, input);
      B[2 * t + e][g] = element(op->b[0], e, input);
      B[2 * t + 8 + e][g] = element(op->b[1], e, input);
      C[g][2 * t + e] = op->c[e];
      C[g + 8][2 * t + e] = op->c[2 + e];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      float acc = C[r][c];
      for (int k = 0; k < 16; ++k) acc = __builtin_fmaf(A[r][k], B[k][c], acc);
      C[r][c] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    float* d = static_cast<float*>(out[l]);
    const int g = l / 4, t = l % 4;
    d[0] = C[g][2 * t], d[1] = C[g][2 * t + 1], d[2] = C[g + 8][2 * t], d[3] = C[g + 8][2 * t + 1];
  }
}

// Hands every lane the values of the elements it receives, from the rows that lanes 0..8num-1
// read themselves (ptx.h): no memory is touched here, so no read is charged to the wrong lane.
void ldmatrix_combine(const void*, const void* const in[32], void* const out[32], unsigned mask) {
  if (mask != 0xffffffffu) throw CudaError("emulated CUDA", "ldmatrix.sync.aligned needs all 32 lanes of the warp");
  const auto* first = static_cast<const LdmatrixIn*>(in[0]);
  const int num = first->num;
  const bool trans = first->trans;
  const uint16_t* rows[32] = {};
  for (int l = 0; l < 32; ++l) {
    const auto* me = static_cast<const LdmatrixIn*>(in[l]);
    if (me->num != num || me->trans != trans)
      throw CudaError("emulated CUDA",
                      fmt::format("ldmatrix: lane {} loads .x{}{} while lane 0 loads .x{}{}", l, me->num,
                                  me->trans ? ".trans" : "", num, trans ? ".trans" : ""),
                      "every lane of the warp must execute the same ldmatrix instruction");
    if (l >= 8 * num) continue;  // its address is ignored, as in PTX
    if (reinterpret_cast<uintptr_t>(me->row) % 16 != 0)
      throw CudaError(
          "emulated CUDA",
          fmt::format("misaligned address (cudaErrorMisalignedAddress): ldmatrix.x{}: lane {} gives row address {}, "
                      "which is not 16-byte aligned", num, l, me->row),
          "each row of an 8x8 b16 matrix is 16 bytes and must be naturally aligned");
    rows[l] = me->data;
  }
  for (int l = 0; l < 32; ++l) {
    auto* o = static_cast<LdmatrixOut*>(out[l]);
    for (int i = 0; i < num; ++i) {
      uint32_t reg = 0;
      for (int e = 0; e < 2; ++e) {
        const uint16_t x = trans ? rows[8 * i + 2 * (l % 4) + e][l / 4] : rows[8 * i + l / 4][2 * (l % 4) + e];
        reg |= static_cast<uint32_t>(x) << (16 * e);
      }
      o->r[i] = reg;
    }
  }
}

void check_async_copy(const void* dst, const void* src, int bytes, int src_bytes, const std::source_location& where) {
  if (bytes != 4 && bytes != 8 && bytes != 16)
    throw CudaError("emulated CUDA", fmt::format("cp.async ({}): cp-size {} is not 4, 8 or 16", at(where), bytes));
  if (src_bytes < 0 || src_bytes > bytes)
    throw CudaError("emulated CUDA",
                    fmt::format("cp.async ({}): src-size {} is outside [0, cp-size {}]", at(where), src_bytes, bytes));
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0)
    throw CudaError("emulated CUDA",
                    fmt::format("misaligned address (cudaErrorMisalignedAddress): cp.async ({}): {} bytes from {} to "
                                "{}, not both aligned to {} bytes", at(where), bytes, src, dst, bytes),
                    "cp.async needs source and destination naturally aligned to the copy size");
}

void fail_misaligned(const void* p, int bytes, const char* what, const std::source_location& where) {
  throw CudaError("emulated CUDA",
                  fmt::format("misaligned address (cudaErrorMisalignedAddress): {} at {} ({} in {}), which is not "
                              "{}-byte aligned", what, p, at(where), where.function_name(), bytes),
                  "on a GPU the kernel stops with cudaErrorMisalignedAddress: a vector access needs its address "
                  "aligned to its size (check the base pointer, the row stride and the offset)");
}

bool vector_reductions() { return gpu_model().major >= 9; }

}  // namespace keel::emu::ptx
