// sm_90's warpgroup matrix multiply, wgmma, one small device function each, as core/cuda/ptx.cuh
// does for mma.sync: under nvcc each is its `asm` (sm_90a; code for any other target traps), on the
// emulated GPU each calls its twin in core/cuda/emu/wgmma.h, whose top comment gives the semantics.
//
//   wgmma_descriptor(addr, lbo, sbo, swizzle)   the 64-bit descriptor of a tile in shared memory
//   wgmma_fence()                     before the first wgmma of a batch: orders the registers it uses
//   wgmma_m64k16<N, T>(d, desc_a, desc_b, accumulate)   d (64 x N, f32) = A (64 x 16) B (16 x N) (+ d)
//   wgmma_m64k16_rs<N, T>(d, a, desc_b, accumulate)     the same with A from registers
//   wgmma_commit_group()              the wgmmas issued since the last commit form a group
//   wgmma_wait_group<K>()             until at most K groups are in flight; then d holds the result
//   wgmma_fence_operand(d)            keeps the compiler from moving reads of d across a wait
//   setmaxnreg_inc<N>(), setmaxnreg_dec<N>()   the warpgroup's registers per thread, for warp
//                                     specialization (a producer gives its registers to consumers)
//
// A wgmma is issued by all 128 threads of a warpgroup (4 consecutive warps, the first a multiple
// of 4) together, and it is asynchronous: its operands are read and its accumulators written at
// some time before the wait that covers it, never earlier than all 128 have issued it.
//
// Fragments (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16"), for the thread of lane
// l in warp w of its warpgroup, g = l / 4, t = l % 4:
//   D (64 x N, f32)  d[4i + 2h + j] = (row 16w + g + 8h, column 8i + 2t + j), i < N/8, h, j < 2
//   A (64 x 16)      a[0] = (16w + g, 2t..2t+1)  a[1] = (16w + g + 8, 2t..)  a[2] = (16w + g, 2t+8..)
//                    a[3] = (16w + g + 8, 2t+8..): per warp, mma.sync's A fragment of its 16 rows.
// So a D fragment of columns 16c..16c+15, rounded to 16 bits in pairs, is an A fragment of those
// columns as k: how P = softmax(S) feeds P V without leaving registers.
//
// Operands in shared memory (PTX ISA, "Shared Memory Matrix Layout"): A is M x K, B is N x K
// ("K-major": each row's 16 k contiguous) unless transposed (MN-major: each k's row of M or N
// contiguous). Swizzle modes of W = 32, 64 or 128 bytes: rows of W bytes; the 16-byte chunk
// index (address bits 4..) is XORed with the row index mod W/16 (address bits 7..): TMA's
// swizzle of the same name writes tiles this way. The swizzle acts on the shared-memory address,
// so a swizzled tile starts at a multiple of 8 W bytes (1024 for 128-byte rows) and a descriptor
// may start inside a row (k 16..31 of a 128-byte row: the tile's address + 32).
//   K-major, no swizzle: 8 x 16-byte core matrices; lbo = bytes from one to the next along k,
//                         sbo = along m/n (8 rows)
//   K-major, swizzled:   rows of W bytes; sbo = bytes from 8 rows to the next 8 (lbo unused)
//   MN-major, no swizzle: lbo = bytes between groups of 8 k, sbo = between groups of 8 m/n
//   MN-major, swizzled:  rows of W bytes hold W/2 m/n; lbo = bytes to the next W/2 m/n,
//                         sbo = bytes to the next 8 k
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/cuda/ptx_sm90.cuh"

#ifdef KEEL_CUDA_EMULATED
#include "core/cuda/emu/wgmma.h"
#endif

// wgmma is sm_90a's (the architecture-specific features of sm_90, which ptxas accepts only for
// sm_90a): code compiled for any other target, sm_90 included, traps where it would issue one.
#if !defined(KEEL_CUDA_EMULATED) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KEEL_SM90A_ONLY(...) __trap()
#else
#define KEEL_SM90A_ONLY(...) __VA_ARGS__
#endif

namespace keel::cuda::ptx {

enum class Swizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };  // the descriptor's codes

// The matrix descriptor (PTX ISA, "Matrix Descriptor Format"): address, lbo and sbo in 16-byte
// units, 14 bits each, at bits 0, 16 and 32; the swizzle mode at bits 62-63; base offset 0.
__host__ __device__ constexpr uint64_t wgmma_descriptor(uint32_t shared_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                        Swizzle swizzle) {
  auto field = [](uint32_t bytes) { return uint64_t((bytes & 0x3ffffu) >> 4); };
  return field(shared_addr) | field(lbo_bytes) << 16 | field(sbo_bytes) << 32 | uint64_t(swizzle) << 62;
}

__device__ __forceinline__ void wgmma_fence(KEEL_PTX_WHERE_ONLY) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::wgmma_fence(where);
#else
  KEEL_SM90A_ONLY(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"));
#endif
}

__device__ __forceinline__ void wgmma_commit_group(KEEL_PTX_WHERE_ONLY) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::wgmma_commit_group(where);
#else
  KEEL_SM90A_ONLY(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
#endif
}

template <int K>
__device__ __forceinline__ void wgmma_wait_group(KEEL_PTX_WHERE_ONLY) {
  static_assert(K >= 0 && K <= 7, "wgmma.wait_group takes 0 to 7");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::wgmma_wait_group(K, where);
#else
  KEEL_SM90A_ONLY(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(K) : "memory"));
#endif
}

// setmaxnreg.inc / .dec: the warpgroup's threads grow to or shrink to Count registers each
// (24 to 256, a multiple of 8), all 128 together: how a producer warpgroup that only issues TMA
// copies gives its registers to the consumers that hold the accumulators. The kernel needs
// __launch_bounds__: ptxas drops a setmaxnreg when it cannot tell the registers at entry (C7508).
template <uint32_t Count>
__device__ __forceinline__ void setmaxnreg_inc(KEEL_PTX_WHERE_ONLY) {
  static_assert(Count >= 24 && Count <= 256 && Count % 8 == 0, "setmaxnreg takes 24 to 256 in steps of 8");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::setmaxnreg(true, Count, where);
#else
  KEEL_SM90A_ONLY(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Count)));
#endif
}
template <uint32_t Count>
__device__ __forceinline__ void setmaxnreg_dec(KEEL_PTX_WHERE_ONLY) {
  static_assert(Count >= 24 && Count <= 256 && Count % 8 == 0, "setmaxnreg takes 24 to 256 in steps of 8");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::setmaxnreg(false, Count, where);
#else
  KEEL_SM90A_ONLY(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Count)));
#endif
}

// An empty asm that claims to read and write each register: nvcc keeps every access of d on its
// side of the wgmma instructions around it.
template <int R>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[R]) {
#ifndef KEEL_CUDA_EMULATED
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}

#ifndef KEEL_CUDA_EMULATED
// The accumulator lists of the widths keel issues (N 32: 16 registers, N 64: 32, N 128: 64).
#define KEEL_WGMMA_D16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KEEL_WGMMA_D32 \
  KEEL_WGMMA_D16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KEEL_WGMMA_D64                                                                                         \
  KEEL_WGMMA_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KEEL_WGMMA_F8(d, i)                                                                                  \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define KEEL_WGMMA_D16_OPS(d) KEEL_WGMMA_F8(d, 0), KEEL_WGMMA_F8(d, 8)
#define KEEL_WGMMA_D32_OPS(d) KEEL_WGMMA_D16_OPS(d), KEEL_WGMMA_F8(d, 16), KEEL_WGMMA_F8(d, 24)
#define KEEL_WGMMA_D64_OPS(d) \
  KEEL_WGMMA_D32_OPS(d), KEEL_WGMMA_F8(d, 32), KEEL_WGMMA_F8(d, 40), KEEL_WGMMA_F8(d, 48), KEEL_WGMMA_F8(d, 56)
// A and B from shared memory. Operands after the accumulators: desc_a, desc_b, accumulate,
// trans_a, trans_b; `nd` is the accumulator count as text.
#define KEEL_WGMMA_SS(n, type, dlist, dops, a, b, s, ta, tb)                                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" s ", 0;\n wgmma.mma_async.sync.aligned.m64n" #n         \
               "k16.f32." type "." type " {" dlist "}, %" a ", %" b ", p, 1, 1, %" ta ", %" tb ";\n}\n"        \
               : dops(d)                                                                                      \
               : "l"(desc_a), "l"(desc_b), "r"(int32_t(accumulate)), "n"(int32_t(TransA)), "n"(int32_t(TransB)))
// A from registers: the four A registers, desc_b, accumulate, trans_b.
#define KEEL_WGMMA_RS(n, type, dlist, dops, a0, b, s, tb)                                                     \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" s ", 0;\n wgmma.mma_async.sync.aligned.m64n" #n        \
               "k16.f32." type "." type " {" dlist "}, {%" a0 "}, %" b ", p, 1, 1, %" tb ";\n}\n"            \
               : dops(d)                                                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int32_t(accumulate)),           \
                 "n"(int32_t(TransB)))
#endif

template <typename T>
constexpr bool kWgmmaInput = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// d = A B (+ d when accumulate): A 64 x 16 and B 16 x N from shared memory, N 32, 64 or 128
// (32: the Hopper backward's dQ slices at head width 64).
template <int N, typename T, bool TransA = false, bool TransB = false>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                             bool accumulate KEEL_PTX_WHERE) {
  static_assert(kWgmmaInput<T>, "wgmma takes bf16 or f16 here");
  static_assert(N == 32 || N == 64 || N == 128, "keel issues wgmma from shared memory with N 32, 64 or 128");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::wgmma_issue({N, ::keel::emu::ptx::mma_input<T>(), TransA, TransB, accumulate, desc_a, desc_b}, d,
                                nullptr, where);
#else
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 32 && kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(32, "f16", KEEL_WGMMA_D16, KEEL_WGMMA_D16_OPS, "16", "17", "18", "19", "20"));
  if constexpr (N == 32 && !kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(32, "bf16", KEEL_WGMMA_D16, KEEL_WGMMA_D16_OPS, "16", "17", "18", "19", "20"));
  if constexpr (N == 64 && kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(64, "f16", KEEL_WGMMA_D32, KEEL_WGMMA_D32_OPS, "32", "33", "34", "35", "36"));
  if constexpr (N == 64 && !kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(64, "bf16", KEEL_WGMMA_D32, KEEL_WGMMA_D32_OPS, "32", "33", "34", "35", "36"));
  if constexpr (N == 128 && kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(128, "f16", KEEL_WGMMA_D64, KEEL_WGMMA_D64_OPS, "64", "65", "66", "67", "68"));
  if constexpr (N == 128 && !kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_SS(128, "bf16", KEEL_WGMMA_D64, KEEL_WGMMA_D64_OPS, "64", "65", "66", "67", "68"));
#endif
}

// d = A B (+ d): A 64 x 16 from registers (a, the fragment above), B 16 x N from shared memory.
template <int N, typename T, bool TransB = false>
__device__ __forceinline__ void wgmma_m64k16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                bool accumulate KEEL_PTX_WHERE) {
  static_assert(kWgmmaInput<T>, "wgmma takes bf16 or f16 here");
  static_assert(N == 64 || N == 128, "keel issues wgmma with N 64 or 128");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::wgmma_issue({N, ::keel::emu::ptx::mma_input<T>(), false, TransB, accumulate, 0, desc_b}, d, a,
                                where);
#else
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 64 && kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_RS(64, "f16", KEEL_WGMMA_D32, KEEL_WGMMA_D32_OPS, "32, %33, %34, %35", "36", "37", "38"));
  if constexpr (N == 64 && !kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_RS(64, "bf16", KEEL_WGMMA_D32, KEEL_WGMMA_D32_OPS, "32, %33, %34, %35", "36", "37", "38"));
  if constexpr (N == 128 && kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_RS(128, "f16", KEEL_WGMMA_D64, KEEL_WGMMA_D64_OPS, "64, %65, %66, %67", "68", "69", "70"));
  if constexpr (N == 128 && !kHalf)
    KEEL_SM90A_ONLY(KEEL_WGMMA_RS(128, "bf16", KEEL_WGMMA_D64, KEEL_WGMMA_D64_OPS, "64, %65, %66, %67", "68", "69", "70"));
#endif
}

}  // namespace keel::cuda::ptx
