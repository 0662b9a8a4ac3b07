// Every inline-PTX instruction keel's kernels use, one small device function each (sm_80 and
// later). Under nvcc each is its `asm`; on the emulated GPU (KEEL_CUDA_EMULATED) each calls its
// twin in core/cuda/emu/ptx.h, which implements the PTX ISA's documented semantics and lane
// layouts, so a kernel built on these runs in CI before any GPU sees it.
//
//   mma_m16n8k16<T>(d, a, b)      d += a b on tensor cores: A 16x16, B 16x8 (bf16 or f16), D f32
//   ldmatrix_x4[_trans], ldmatrix_x2_trans   4 or 2 8x8 b16 matrices from shared memory into fragments
//   cp_async_16, cp_async_commit, cp_async_wait<N>   global -> shared copies that overlap compute
//   ex2, min_nan                  2^x in one instruction; a minimum that keeps NaN
//   ld_acquire_gpu, red_release_gpu_add, spin_wait_equal   an ordered hand-over between blocks
//   named_barrier_sync, named_barrier_arrive   bar.sync / bar.arrive: a barrier of some warps
//   atom_add_acq_rel_gpu          a counter that tells the last of several blocks it is the last
//   red_add_f32x2                 two adjacent f32 atomic adds as one instruction (sm_90)
//   load_16, store_16             16 bytes at once (LDG/STG/LDS/STS.128): plain C++ under nvcc
//
// Fragment layouts (the PTX ISA's; g = lane / 4, t = lane % 4; two 16-bit elements per 32-bit
// register, the first in the low half):
//   A (16 x 16, row-major)   a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)  a[2] = (g, 2t+8..)  a[3] = (g+8, 2t+8..)
//   B (16 x 8, k x n)        b[0] = (k 2t..2t+1, n g)   b[1] = (k 2t+8..2t+9, n g)
//   C, D (16 x 8, f32)       d[0], d[1] = (g, 2t), (g, 2t+1)   d[2], d[3] = (g+8, 2t), (g+8, 2t+1)
//   ldmatrix: lanes 8i..8i+7 give the 8 row addresses (16 bytes each) of matrix i; register i of
//   lane l gets row l/4, columns 2(l%4), 2(l%4)+1 of matrix i, or with _trans column l/4, rows
//   2(l%4), 2(l%4)+1. So a non-transposed 8x8 block of a row-major tile is an A register (or a B
//   register of a matrix stored n-major), and a transposed one a B register of a k-major matrix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#ifdef KEEL_CUDA_EMULATED
#include <source_location>

#include "core/cuda/emu/ptx.h"
// The caller's line, for the emulator's error messages.
#define KEEL_PTX_WHERE , std::source_location where = std::source_location::current()
#define KEEL_PTX_WHERE_ONLY std::source_location where = std::source_location::current()
#define KEEL_PTX_PASS_WHERE , where
#else
#define KEEL_PTX_WHERE
#define KEEL_PTX_WHERE_ONLY
#define KEEL_PTX_PASS_WHERE
#endif

namespace keel::cuda::ptx {

// d += a b: mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (T = bf16 or f16).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2] KEEL_PTX_WHERE) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "mma.sync takes bf16 or f16");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::mma_m16n8k16(
      std::is_same_v<T, __half> ? ::keel::emu::ptx::MmaInput::f16 : ::keel::emu::ptx::MmaInput::bf16, d, a, b, d,
      where);
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The shared-memory address of p (the emulated GPU's: ptx.h).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::shared_address(p);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// ldmatrix.sync.aligned.m8n8.{x4,x4.trans,x2.trans}.shared.b16: `row` is this lane's row address.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::ldmatrix<4>(r, row, false, where);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::ldmatrix<2>(r, row, true, where);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::ldmatrix<4>(r, row, true, where);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
#endif
}

// cp.async.cg.shared.global: 16 bytes from global `src` to shared `dst`, both 16-byte aligned,
// landing at the latest when this thread waits for the group it is committed in. With
// zero_fill the source is not read and `dst` receives 16 zero bytes (src-size 0).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool zero_fill KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::cp_async(dst, src, 16, zero_fill ? 0 : 16, where);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(zero_fill ? 0 : 16));
#endif
}
// cp.async.commit_group: closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// cp.async.wait_group N: this thread's copies have landed, but for those of its N newest groups.
// Other threads see them after a barrier that follows the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ex2.approx.ftz.f32: 2^x in one MUFU instruction (what __expf runs after multiplying by
// log2 e; a kernel that folds log2 e into its own scale saves that multiply per element).
// Relative error about 2^-22, subnormal results flushed to 0; ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
#ifdef KEEL_CUDA_EMULATED
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}
// min.NaN.f32 (sm_80): the smaller of a and b, but NaN if either is NaN (fminf drops a NaN), so
// one running minimum also records whether a NaN went by.
__device__ __forceinline__ float min_nan(float a, float b) {
#ifdef KEEL_CUDA_EMULATED
  return a != a || b != b ? __int_as_float(0x7fffffff) : fminf(a, b);
#else
  float y;
  asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
#endif
}

// ld.acquire.gpu: a load that orders this thread's later accesses after it, at GPU scope.
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::ld_acquire(p);
#else
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}
// red.release.gpu.add: adds v to *p after this thread's earlier accesses (and, after a
// __syncthreads, its block's) are visible at GPU scope.
__device__ __forceinline__ void red_release_gpu_add(int* p, int v) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::red_release_add(p, v);
#else
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
#endif
}
// atom.acq_rel.gpu.add: adds v to *p and returns the old value; a release of this thread's
// earlier accesses (and, after a __syncthreads, its block's) and an acquire of those of every
// thread whose add it follows: the block that sees the last count may read what the others wrote.
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::atom_add_acq_rel(p, v);
#else
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
#endif
}
// red.global.add.v2.f32 (sm_90): p[0] += a and p[1] += b, atomically each, as one instruction
// (p 8-byte aligned): half the instructions and L2 requests of two scalar adds, the same sums. On
// sm_80 it is the two scalar adds. The emulated GPU's twin takes the branch of its compute
// capability (KEEL_EMU_GPU).
__device__ __forceinline__ void red_add_f32x2(float* p, float a, float b KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::red_add_f32x2(p, a, b, where);
#elif __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}
// 16 bytes at once: a V (uint4, float4: 16 bytes, 16-byte aligned) from or to p, which must be
// 16-byte aligned, in one instruction. Plain C++ under nvcc, which emits that instruction for it;
// on the emulated GPU the twin checks the address first, as the hardware does (a misaligned one
// is cudaErrorMisalignedAddress).
template <typename V>
__device__ __forceinline__ V load_16(const void* p KEEL_PTX_WHERE) {
  static_assert(sizeof(V) == 16 && alignof(V) == 16, "a 16-byte vector type");
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::load_vector<V>(p, where);
#else
  return *reinterpret_cast<const V*>(p);
#endif
}
template <typename V>
__device__ __forceinline__ void store_16(void* p, const V& v KEEL_PTX_WHERE) {
  static_assert(sizeof(V) == 16 && alignof(V) == 16, "a 16-byte vector type");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::store_vector(p, v, where);
#else
  *reinterpret_cast<V*>(p) = v;
#endif
}

// Spins until *flag == expected (an acquire). The block that sets the flag must have started
// before this one (a GPU promises no order of its own: take it from an atomic ticket, as
// attention_mma_backward.cu does); the emulated GPU runs other blocks meanwhile and reports a
// wait that no block able to run could satisfy.
__device__ __forceinline__ void spin_wait_equal(const int* flag, int expected KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::spin_wait_equal(flag, expected, where);
#else
  while (ld_acquire_gpu(flag) != expected) __nanosleep(32);
#endif
}

// Named barriers (bar.sync / bar.arrive id, count): a barrier for `count` threads (whole warps)
// of the block, id 1..15 (0 is __syncthreads'). A phase completes when `count` threads have
// arrived; _sync waits for it, _arrive counts this thread and goes on. So one group of warps can
// let another go ahead (arrive on the other's barrier) without waiting itself: the hand-over of
// turns between two warpgroups (attention_sm90_forward.cu). Memory written before an arrival is
// visible after the sync it completes.
__device__ __forceinline__ void named_barrier_sync(int id, int count KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bar_sync(id, count, where);
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void named_barrier_arrive(int id, int count KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bar_arrive(id, count, where);
#else
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}

}  // namespace keel::cuda::ptx
