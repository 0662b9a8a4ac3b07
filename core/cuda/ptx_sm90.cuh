// sm_90's asynchronous data movement, one small device function each, as core/cuda/ptx.cuh does
// for sm_80's instructions: under nvcc each is its `asm` (compiled for sm_90 and later; on an
// older GPU it traps), on the emulated GPU (KEEL_CUDA_EMULATED) each calls its twin in
// core/cuda/emu/mbarrier.h, whose top comment gives the semantics.
//
//   mbarrier_init(bar, count)             a barrier in shared memory for `count` arrivals a phase
//   mbarrier_arrive(bar)                  one arrival
//   mbarrier_arrive_expect_tx(bar, bytes) one arrival that also announces bytes the phase waits for
//   mbarrier_try_wait_parity(bar, p)      whether the phase of parity p has completed
//   mbarrier_wait_parity(bar, p)          until it has
//   bulk_copy_global_to_shared(dst, src, bytes, bar)   cp.async.bulk: `bytes` (a multiple of 16,
//                                         both addresses 16-byte aligned) that complete on bar
//   tma_load<R>(dst, map, coords, bar)    cp.async.bulk.tensor: a box of a tensor (TMA), swizzled
//                                         as its map says, that completes on bar
//   tma_store<R>(map, coords, src)        cp.async.bulk.tensor, the other way: a box from shared
//                                         memory (laid out as tma_load leaves it) into the tensor,
//                                         in the thread's open bulk group
//   bulk_reduce_add_f32(dst, src, bytes)  cp.reduce.async.bulk .add.f32: global dst += shared
//                                         src, float by float, in the thread's open bulk group
//   bulk_commit_group()                   closes the thread's open bulk group
//   bulk_wait_group_read<N>()             until at most N of its groups still read shared memory
//   bulk_wait_group<N>()                  until at most N of its groups are still writing
//   fence_proxy_async()                   shared memory written or read by threads, before a bulk
//                                         copy or barrier operation of the async proxy uses it
//
// A pipeline of S slots uses two barriers a slot: `full` (count 1: the producer's
// arrive_expect_tx, completed by the copy's bytes) and `empty` (count: the consumers). Round r of
// slot s waits on full with parity r & 1 and on empty with parity (r & 1) ^ 1, so the producer's
// first wait on each empty slot passes at once (tests/emu/test_mbarrier.cu runs one).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/cuda/ptx.cuh"

#ifdef KEEL_CUDA_EMULATED
#include "core/cuda/emu/mbarrier.h"
#endif

// Under nvcc, code compiled for a GPU before sm_90 traps where it would use these: a kernel built
// on them must be launched on sm_90 and later only.
#if !defined(KEEL_CUDA_EMULATED) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KEEL_SM90_ONLY(...) __trap()
#else
#define KEEL_SM90_ONLY(...) __VA_ARGS__
#endif

namespace keel::cuda::ptx {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::mbarrier_init(bar, count, where);
#else
  KEEL_SM90_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count)
                              : "memory"));
#endif
}

__device__ __forceinline__ uint64_t mbarrier_arrive(uint64_t* bar KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::mbarrier_arrive(bar, 0, where);
#else
  uint64_t token = 0;
  KEEL_SM90_ONLY(asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
                              : "=l"(token)
                              : "r"(shared_address(bar))
                              : "memory"));
  return token;
#endif
}

__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::mbarrier_arrive(bar, bytes, where);
#else
  uint64_t token = 0;
  KEEL_SM90_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
                              : "=l"(token)
                              : "r"(shared_address(bar)), "r"(bytes)
                              : "memory"));
  return token;
#endif
}

__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  return ::keel::emu::ptx::mbarrier_try_wait_parity(bar, parity, where);
#else
  uint32_t done = 0;
  KEEL_SM90_ONLY(asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory"));
  return done != 0;
#endif
}

__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::mbarrier_wait_parity(bar, parity, where);
#else
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
#endif
}

__device__ __forceinline__ void bulk_copy_global_to_shared(void* dst, const void* src, uint32_t bytes,
                                                           uint64_t* bar KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bulk_copy_global_to_shared(dst, src, bytes, bar, where);
#else
  KEEL_SM90_ONLY(asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory"));
#endif
}

// cp.async.bulk.tensor.{1..5}d: the box of the tensor map at coordinates c (elements, innermost
// first; outside the tensor reads zeros) into dst (128-byte aligned), swizzled as the map says,
// completing its bytes on bar. map is the address of the kernel's `const __grid_constant__
// CUtensorMap` parameter (core/cuda/tensor_map.h).
template <int Rank>
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, const int32_t (&c)[Rank],
                                         uint64_t* bar KEEL_PTX_WHERE) {
  static_assert(Rank >= 1 && Rank <= 5, "a tensor map has 1 to 5 dimensions");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::tma_load(dst, map, c, Rank, bar, where);
#else
  const uint32_t d = shared_address(dst), b = shared_address(bar);
  const auto m = reinterpret_cast<uint64_t>(map);
#define KEEL_TMA(n, coords, ...)                                                                              \
  KEEL_SM90_ONLY(asm volatile("cp.async.bulk.tensor." #n "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" \
                              " [%0], [%1, {" coords "}], [%2];\n" ::"r"(d),                                  \
                              "l"(m), "r"(b), __VA_ARGS__ : "memory"))
  if constexpr (Rank == 1) KEEL_TMA(1, "%3", "r"(c[0]));
  if constexpr (Rank == 2) KEEL_TMA(2, "%3, %4", "r"(c[0]), "r"(c[1]));
  if constexpr (Rank == 3) KEEL_TMA(3, "%3, %4, %5", "r"(c[0]), "r"(c[1]), "r"(c[2]));
  if constexpr (Rank == 4) KEEL_TMA(4, "%3, %4, %5, %6", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
  if constexpr (Rank == 5) KEEL_TMA(5, "%3, %4, %5, %6, %7", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]));
#undef KEEL_TMA
#endif
}

// cp.async.bulk.tensor.{1..5}d, shared -> global: the box of the tensor map at coordinates c
// from src (128-byte aligned, laid out and swizzled as a tma_load of the same map leaves it);
// elements outside the tensor are not written. The copy reads src at some moment before the
// bulk_wait_group_read that covers its group: src must hold the box when the store is issued
// (each writer's fence_proxy_async, then a barrier) and stay unchanged until that wait.
template <int Rank>
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const int32_t (&c)[Rank],
                                          const void* src KEEL_PTX_WHERE) {
  static_assert(Rank >= 1 && Rank <= 5, "a tensor map has 1 to 5 dimensions");
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::tma_store(map, c, Rank, src, where);
#else
  const uint32_t s = shared_address(src);
  const auto m = reinterpret_cast<uint64_t>(map);
#define KEEL_TMA(n, coords, ...)                                                                          \
  KEEL_SM90_ONLY(asm volatile("cp.async.bulk.tensor." #n "d.global.shared::cta.bulk_group [%0, {" coords \
                              "}], [%1];\n" ::"l"(m),                                                    \
                              "r"(s), __VA_ARGS__ : "memory"))
  if constexpr (Rank == 1) KEEL_TMA(1, "%2", "r"(c[0]));
  if constexpr (Rank == 2) KEEL_TMA(2, "%2, %3", "r"(c[0]), "r"(c[1]));
  if constexpr (Rank == 3) KEEL_TMA(3, "%2, %3, %4", "r"(c[0]), "r"(c[1]), "r"(c[2]));
  if constexpr (Rank == 4) KEEL_TMA(4, "%2, %3, %4, %5", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
  if constexpr (Rank == 5) KEEL_TMA(5, "%2, %3, %4, %5, %6", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]));
#undef KEEL_TMA
#endif
}

// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: dst[i] += src[i] for bytes / 4
// floats (bytes a multiple of 16; src in shared memory, both 16-byte aligned), each add atomic,
// in the thread's open bulk group; src is read as a tma_store's is (until a wait covers it).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes KEEL_PTX_WHERE) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bulk_reduce_add_f32(dst, src, bytes, where);
#else
  KEEL_SM90_ONLY(asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                                  dst),
                              "r"(shared_address(src)), "r"(bytes)
                              : "memory"));
#endif
}

// cp.async.bulk.commit_group: the bulk copies this thread issued since its last commit are one group.
__device__ __forceinline__ void bulk_commit_group(KEEL_PTX_WHERE_ONLY) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bulk_commit_group(where);
#else
  KEEL_SM90_ONLY(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"));
#endif
}

// cp.async.bulk.wait_group.read N: until every group of this thread's but the N most recently
// committed has read its shared memory (which may then be written again; the global writes may
// still be on their way, visible to the host once the kernel has finished).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read(KEEL_PTX_WHERE_ONLY) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bulk_wait_group(N, true, where);
#else
  KEEL_SM90_ONLY(asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"));
#endif
}

// cp.async.bulk.wait_group N: as bulk_wait_group_read, and the older groups' writes are done
// (visible to this thread, which may then hand them on, e.g. with a release).
template <int N>
__device__ __forceinline__ void bulk_wait_group(KEEL_PTX_WHERE_ONLY) {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::bulk_wait_group(N, false, where);
#else
  KEEL_SM90_ONLY(asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"));
#endif
}

__device__ __forceinline__ void fence_proxy_async() {
#ifdef KEEL_CUDA_EMULATED
  ::keel::emu::ptx::fence_proxy_async();
#else
  KEEL_SM90_ONLY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
#endif
}

}  // namespace keel::cuda::ptx
