// sm_90's warpgroup MMA on the emulated GPU: the twins of core/cuda/wgmma.cuh, with the PTX ISA's
// semantics ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions").
//
// wgmma.mma_async.m64nNk16 multiplies A (64 x 16, from shared memory through a descriptor or
// from the registers of the warpgroup's 128 threads) by B (16 x N, shared memory) into D (64 x N,
// f32, N/2 registers a thread), asynchronously: each thread's accumulator registers read
// NaN from the issue until the wgmma.wait_group that covers it, and the operands are read then,
// in the fiber of the waiting thread (so ThreadSanitizer sees a tile overwritten before the wait
// as the race it is, and the overwritten data shows in the result). A wait completes a thread's
// wgmmas in issue order, each once all 128 threads of its warpgroup have issued it: a warpgroup
// where a thread never issues it is the emulator's deadlock error, naming the wait.
//
// Accumulation: products of the 16-bit operands are exact in f32 and summed in k order with
// fmaf, the accumulator first, as the mma.sync twin does (ptx.h). wgmmas issued on the same
// registers before a wait chain, each adding to the previous one's result, as the ISA
// guarantees for the same shape.
//
// Checked, as errors where a GPU's behaviour is undefined: a warpgroup is 4 whole warps of the
// block; its 128 threads issue the same wgmma (shape, types, descriptors); a thread's first
// wgmma after the kernel starts or after a wait follows a wgmma.fence (stricter than the ISA,
// which asks for it only where registers were touched in between, as keel's kernels always
// have); a descriptor's elements lie in the block's dynamic shared memory (ptx.h's addresses) and
// its base offset is 0 (keel starts swizzled tiles on their pattern's boundary).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "core/cuda/emu/ptx.h"

namespace keel::emu::ptx {

template <typename T>
constexpr MmaInput mma_input() {
  return std::is_same_v<T, __half> ? MmaInput::f16 : MmaInput::bf16;
}

struct WgmmaOp {
  int n;  // 8 to 256, a multiple of 8
  MmaInput input;
  bool trans_a, trans_b;  // MN-major A, B in shared memory
  bool accumulate;        // D = A B + D, else D = A B
  uint64_t desc_a, desc_b;
};

void wgmma_fence(const std::source_location& where);
// d: this thread's N/2 accumulators; a: its four A registers, or null for A in shared memory.
void wgmma_issue(const WgmmaOp& op, float* d, const uint32_t* a, const std::source_location& where);
void wgmma_commit_group(const std::source_location& where);
// setmaxnreg.{inc,dec}: checked (a count of 24 to 256 in steps of 8, the same in every thread of
// the warpgroup); registers are the compiler's business, which the emulator does not model.
void setmaxnreg(bool inc, uint32_t count, const std::source_location& where);

// One of this thread's wgmmas that a wait completes: its operands as this thread needs them.
struct WgmmaDue {
  WgmmaOp op;
  bool a_in_registers;
  uint32_t a_rows[2][8];  // register form: A's rows 16w + g and 16w + g + 8, k pairs 0..7
  float acc[128];         // what it adds to (zeros when it does not accumulate)
  int warp, lane;         // the thread's warp in its warpgroup, and lane
};
// The next wgmma a wait with `keep` groups left in flight completes, once its warpgroup has
// issued it (the thread sleeps until then); false when none is left.
bool wgmma_next_due(int keep, WgmmaDue* due, const std::source_location& where);
// Hands the result to the accumulator registers, or to the next wgmma chained on them.
void wgmma_done(const float* result);
// Where element (mn, k) of the operand a descriptor describes lies, MN-major or K-major.
const unsigned char* wgmma_element(uint64_t desc, bool mn_major, int mn, int k, const std::source_location& where);

inline float wgmma_value(uint16_t bits, MmaInput input) {
  if (input == MmaInput::bf16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
inline float wgmma_shared(uint64_t desc, bool mn_major, int mn, int k, MmaInput input,
                          const std::source_location& where) {
  uint16_t bits;
  std::memcpy(&bits, wgmma_element(desc, mn_major, mn, k, where), 2);  // this thread's read
  return wgmma_value(bits, input);
}

// This thread's N/2 results of a due wgmma. Inline, so that the shared-memory reads are the
// kernel's own (ThreadSanitizer and AddressSanitizer see them in its fiber).
inline void wgmma_compute(const WgmmaDue& due, float* out, const std::source_location& where) {
  const WgmmaOp& op = due.op;
  const int g = due.lane / 4, t = due.lane % 4;
  float a[2][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) {
      const int row = 16 * due.warp + g + 8 * h;
      a[h][k] = due.a_in_registers
                    ? wgmma_value(static_cast<uint16_t>(due.a_rows[h][k / 2] >> (16 * (k % 2))), op.input)
                    : wgmma_shared(op.desc_a, op.trans_a, row, k, op.input, where);
    }
  for (int i = 0; i < op.n / 8; ++i)
    for (int j = 0; j < 2; ++j) {
      const int col = 8 * i + 2 * t + j;
      float b[16];
      for (int k = 0; k < 16; ++k) b[k] = wgmma_shared(op.desc_b, op.trans_b, col, k, op.input, where);
      for (int h = 0; h < 2; ++h) {
        float acc = due.acc[4 * i + 2 * h + j];
        for (int k = 0; k < 16; ++k) acc = __builtin_fmaf(a[h][k], b[k], acc);
        out[4 * i + 2 * h + j] = acc;
      }
    }
}

inline void wgmma_wait_group(int keep, const std::source_location& where) {
  WgmmaDue due;
  float out[128];
  while (wgmma_next_due(keep, &due, where)) {
    wgmma_compute(due, out, where);
    wgmma_done(out);
  }
}

}  // namespace keel::emu::ptx
