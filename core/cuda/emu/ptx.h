// The PTX instructions of core/cuda/ptx.cuh on the emulated GPU: each twin does what the PTX ISA
// documents, with its lane layouts, so a kernel that assumes a wrong layout computes a wrong
// result here, as it would on a GPU.
//
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32   a warp collective
//   ldmatrix.sync.aligned.m8n8.{x2,x4}{,.trans}.shared.b16              a warp collective
//   cp.async.cg.shared.global (16 bytes, optional zero fill), cp.async.commit_group,
//   cp.async.wait_group N, cp.async.wait_all                            per thread
//   ld.acquire.gpu, red.release.gpu.add (32-bit) and a spin-wait on a flag (block.h)
//   red.global.add.v2.f32, and 16-byte loads and stores (ld/st .v4)
//   bar.sync a, b and bar.arrive a, b (named barriers: block.h, named_barrier)
//
// Vector accesses are checked for alignment as the hardware checks them: a misaligned
// ldmatrix row, cp.async operand, red.global.add.v2.f32 address or 16-byte load or store is the
// CudaError of cudaErrorMisalignedAddress, where a GPU stops the kernel with that error.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4, each 32-bit register holding two 16-bit elements, the first in
// its low half:
//   A (16 x 16, row): a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)  a[2] = (g, 2t+8..)  a[3] = (g+8, 2t+8..)
//   B (16 x 8, col):  b[0] = (2t..2t+1, g)  b[1] = (2t+8..2t+9, g)          (rows are k)
//   C, D (16 x 8, f32): c[0], c[1] = (g, 2t), (g, 2t+1)   c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// ldmatrix: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i; lane l
// receives in register i the elements (l / 4, 2(l % 4)) and (l / 4, 2(l % 4) + 1) of matrix i,
// or with .trans (2(l % 4), l / 4) and (2(l % 4) + 1, l / 4) (row = the row whose address was
// given).
//
// Memory is touched here, in the kernel's own code (so ThreadSanitizer and AddressSanitizer see
// each lane's accesses as its own), never inside the collective.
//
// ldmatrix reads as the PTX memory model (and compute-sanitizer's racecheck) count it: lane
// i < 8 num, which names row i, reads that row's 16 bytes itself, in its own fiber, before the
// collective; the collective then hands out values, not addresses. So a lane that overwrites a
// row another lane of its warp named, with no __syncwarp between, races here as on a GPU, even
// when the writer received that very element (a staging store in the mma accumulator layout).
//
// cp.async copies are queued per thread (block.h) and land when the thread waits for their
// group; meanwhile the destination holds NaN bytes, written when the copy is issued. So a thread
// that reads its destination too early reads NaN, another thread that reads it without a barrier
// after the wait races with the landing copy, and one whose earlier reads of the destination are
// not ordered before the issue races with the NaN write (ThreadSanitizer reports both) - the
// window in which a GPU may write the data.
//
// Tensor-core arithmetic: products of the 16-bit operands are exact in f32 and summed in k
// order with fmaf, the accumulator first. A GPU's tensor cores sum in an order and with an
// internal precision of their own, which only a GPU shows.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <source_location>

#include "core/cuda/emu/block.h"

namespace keel::emu::ptx {

enum class MmaInput : uint8_t { bf16, f16 };
struct MmaOperands {
  uint32_t a[4], b[2];
  float c[4];
};
void mma_combine(const void* input, const void* const in[32], void* const out[32], unsigned mask);

inline void mma_m16n8k16(MmaInput input, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                         const float (&c)[4], const std::source_location& where) {
  MmaOperands in{};
  for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = c[i];
  in.b[0] = b[0], in.b[1] = b[1];
  float out[4];
  static constexpr MmaInput kInputs[] = {MmaInput::bf16, MmaInput::f16};
  warp_collective(Collective::mma_ptx, 0xffffffffu, &in, out, mma_combine, &kInputs[static_cast<int>(input)], where);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

struct LdmatrixIn {
  const void* row;  // this lane's row address (used when the lane is one of those that give one)
  int num;          // 2 or 4 matrices
  bool trans;
  uint16_t data[8];  // the row's 16 bytes, read by this lane when it gives an aligned address
};
struct LdmatrixOut {
  uint32_t r[4];
};
void ldmatrix_combine(const void*, const void* const in[32], void* const out[32], unsigned mask);

template <int Num>
void ldmatrix(uint32_t (&r)[Num], const void* row, bool trans, const std::source_location& where) {
  static_assert(Num == 2 || Num == 4, "keel's kernels load 2 or 4 matrices");
  LdmatrixIn in{row, Num, trans, {}};
  // The read belongs to the lane that names the row, so it happens here, in this lane's fiber.
  // A misaligned row is not read: the combine reports it, before anything else goes wrong.
  if (lane_id() < 8 * Num && reinterpret_cast<uintptr_t>(row) % 16 == 0) std::memcpy(in.data, row, 16);
  LdmatrixOut out;
  warp_collective(Collective::ldmatrix, 0xffffffffu, &in, &out, ldmatrix_combine, nullptr, where);
  for (int i = 0; i < Num; ++i) r[i] = out.r[i];
}

// cp.async: checks the operands as the ISA requires, marks the destination in flight, queues.
void check_async_copy(const void* dst, const void* src, int bytes, int src_bytes, const std::source_location& where);
inline void cp_async(void* dst, const void* src, int bytes, int src_bytes, const std::source_location& where) {
  check_async_copy(dst, src, bytes, src_bytes, where);
  std::memset(dst, 0xff, bytes);
  async_copy_issue({dst, src, bytes, src_bytes}, where);
}
inline void cp_async_commit() { async_copy_commit(); }
// The copies of all committed groups but the `keep` newest land, in issue order.
inline void cp_async_wait(int keep) {
  AsyncCopy c;
  while (async_copy_next_due(keep, &c)) {
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
    if (c.bytes > c.src_bytes) std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
  }
}

inline int ld_acquire(const int* p) {
  return std::atomic_ref<int>(*const_cast<int*>(p)).load(std::memory_order_acquire);
}
inline void red_release_add(int* p, int v) { std::atomic_ref<int>(*p).fetch_add(v, std::memory_order_release); }
inline int atom_add_acq_rel(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v, std::memory_order_acq_rel); }
// A misaligned vector access: the CudaError of cudaErrorMisalignedAddress, naming the access.
[[noreturn]] void fail_misaligned(const void* p, int bytes, const char* what, const std::source_location& where);
// sm_90's one instruction needs p 8-byte aligned; sm_80's two scalar adds, 4-byte.
bool vector_reductions();  // the emulated GPU's compute capability is 9.0 or more
inline void red_add_f32x2(float* p, float a, float b, const std::source_location& where) {
  const int align = vector_reductions() ? 8 : 4;
  if (reinterpret_cast<uintptr_t>(p) % align != 0)
    fail_misaligned(p, align, align == 8 ? "red.global.add.v2.f32" : "atomicAdd (f32)", where);
  std::atomic_ref<float>(p[0]).fetch_add(a, std::memory_order_relaxed);
  std::atomic_ref<float>(p[1]).fetch_add(b, std::memory_order_relaxed);
}
template <typename V>
V load_vector(const void* p, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V) != 0) fail_misaligned(p, sizeof(V), "a 16-byte load", where);
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V>
void store_vector(void* p, const V& v, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(V) != 0) fail_misaligned(p, sizeof(V), "a 16-byte store", where);
  std::memcpy(p, &v, sizeof(V));
}
// Shared-memory addresses (cvta.to.shared): dynamic shared memory starts at 1024, so that a
// kernel that takes an address for an offset into its own buffer computes a wrong one here too;
// static __shared__ variables sit at 2^18 and above, beyond what a wgmma descriptor's 18 address
// bits reach (keel keeps wgmma tiles in dynamic shared memory).
inline constexpr uint32_t kDynamicSharedAddress = 1024, kStaticSharedAddress = 1u << 18;
uint32_t shared_address(const void* p);

// A flag that does not hold its value yet: the block gives way until it does (block.h), and a
// flag no block that can run would ever set is a deadlock the grid reports (grid.cpp).
inline void spin_wait_equal(const int* flag, int expected, const std::source_location& where) {
  while (ld_acquire(flag) != expected) wait_for_flag(flag, expected, where);
}

// bar.sync / bar.arrive with a barrier id and a thread count (block.h).
inline void bar_sync(int id, int count, const std::source_location& where) { named_barrier(id, count, true, where); }
inline void bar_arrive(int id, int count, const std::source_location& where) { named_barrier(id, count, false, where); }

}  // namespace keel::emu::ptx
