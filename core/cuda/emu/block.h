// The emulated GPU's execution model: the blocks of a grid start in an order (index order, or
// reverse, or shuffled: cuda::BlockSchedule), up to a number of them resident at once, and run
// on the launching host thread; the threads of a block are fibers (fiber.h) that the block's
// scheduler interleaves.
//
// What makes this CUDA and not just a loop over threads is where threads wait for each other:
//  - __syncthreads: every thread of the block must arrive; then all go on.
//  - warp collectives (__syncwarp, the __shfl_*_sync family, votes, and the PTX instructions
//    mma.sync and ldmatrix of ptx.h): the lanes named in the mask must all arrive
//    at the same collective; the last to arrive computes the result for every lane.
//  - a spin-wait on a flag that another block sets (ptx::spin_wait_equal): the block gives way
//    to the other resident blocks, and to blocks not started yet while there is room for them.
//  - a wait on an mbarrier's phase (mbarrier.h): the thread sleeps until the phase completes.
//  - a named barrier (bar.sync / bar.arrive id, count): `count` threads must arrive; those that
//    arrived with bar.sync wait for the rest, those with bar.arrive go on at once.
// The CUDA rules are checked as the threads run, and a break is a CudaError naming the rule,
// the call site, the block and the threads involved: a barrier that only part of a block
// reaches, a thread that exits while others wait for it, a mask that names an exited or absent
// lane, lanes waiting in different collectives, resident blocks that all wait on flags no block
// that can run would set. A real GPU would hang or return garbage.
//
// Everything here is called from the device functions in device_functions.h and ptx.h, from
// KEEL_SHARED and KEEL_DYNAMIC_SHARED (core/cuda/launch.cuh) and from launch.h; kernels never call
// it directly. The block scheduler is block.cpp, the grid's grid.cpp, the waits and their rules
// block_sync.cpp, shared memory shared_memory.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

#include "core/cuda/runtime.h"

// CUDA's built-in variables. Each emulated thread sees its own: the scheduler sets them
// whenever it runs a CUDA thread. constinit: no thread-local initialisation to guard, so a
// kernel reads them as plain thread-local memory.
extern constinit thread_local uint3 threadIdx;
extern constinit thread_local uint3 blockIdx;
extern constinit thread_local dim3 blockDim;
extern constinit thread_local dim3 gridDim;

namespace keel::emu {

// A launch as run_grid runs it: the kernel (the identity CUDA keeps its shared-memory limits
// under), the configuration it was checked with, and body(ctx), which runs one CUDA thread.
struct Launch {
  const void* kernel = nullptr;
  dim3 grid, block;
  size_t dynamic_shared = 0;
  // cudaFuncSetAttribute's cudaFuncAttributeMaxDynamicSharedMemorySize for the kernel at launch,
  // -1 when it was never set (the limit is then 48 KB for static and dynamic together).
  long max_dynamic_attribute = -1;
  void (*body)(const void* ctx) = nullptr;
  const void* ctx = nullptr;
};

// Runs body(ctx) once per thread of every block of the grid, the blocks in the order and with
// the residency of block_schedule(); the launch configuration was checked by the caller.
// Rethrows the first error raised in any thread, after abandoning the resident blocks; a
// deadlock between blocks is a CudaError naming each waiting block, its kernel and its flag.
void run_grid(const Launch& launch);

// The order blocks start in and how many may be resident at once (cuda::set_emulated_block_schedule;
// KEEL_EMU_BLOCK_ORDER and KEEL_EMU_RESIDENT_BLOCKS give the default).
cuda::BlockSchedule block_schedule();
void set_block_schedule(const cuda::BlockSchedule& schedule);

// Count-only mode (cuda::set_emulated_count_only): while on, run_grid checks nothing more and
// runs no thread, and the cuBLAS / cuBLASLt products compute nothing, so a program's launches,
// allocations and copies happen at sizes the emulator could never compute, its values meaningless.
void set_count_only(bool on);
bool count_only();

// This block's dynamic shared memory (the launch's third argument), aligned to `align`.
unsigned char* dynamic_shared(size_t align);

// A static __shared__ variable (KEEL_SHARED in core/cuda/launch.cuh): one declaration site, a
// constant the compiler lays down once per site and kernel instantiation.
struct SharedSite {
  size_t bytes, align;
  const char* name;
  std::source_location where;
};
// This block's copy of the variable declared at `site`: the first thread of the block to reach
// the declaration lays it out after the block's earlier static variables (filled with NaN bytes,
// as shared memory a kernel never wrote shows here) and checks the block's static bytes plus the
// launch's dynamic bytes against the kernel's limit, as a GPU checks them at launch; the other
// threads find it.
unsigned char* static_shared_bytes(const SharedSite& site);
template <typename T>
T& static_shared(const SharedSite& site) {
  return *reinterpret_cast<T*>(static_shared_bytes(site));
}

// Waits for the whole block (__syncthreads).
void sync_block(const std::source_location& where);

// The running CUDA thread saw *flag != expected in a spin-wait (ptx.h): it sleeps until the flag
// holds `expected`, while the rest of its block runs on and, once nothing else in it can, other
// blocks run. Returns when the scheduler saw the value; the caller loads the flag again.
void wait_for_flag(const int* flag, int expected, const std::source_location& where);
// The same for an mbarrier (mbarrier.h) whose phase of this parity has not completed: it sleeps
// until the barrier's phase word flips, and a deadlock report names the barrier and the parity.
void wait_for_phase(const uint64_t* bar, uint32_t parity, const std::source_location& where);

// A named barrier (PTX bar.sync / bar.arrive a, b; "Parallel Synchronization and Communication
// Instructions: bar"): id 1..15 (0 is __syncthreads'), count a multiple of 32 up to the block's
// threads, the same for every arrival of a phase. The phase completes when `count` threads have
// arrived; the barrier is then ready for the next phase. With wait, the thread sleeps until its
// phase completes (bar.sync); without, it only counts itself (bar.arrive). A phase that never
// completes is the deadlock the grid reports (grid.cpp), naming the barrier.
void named_barrier(int id, int count, bool wait, const std::source_location& where);

// A warp collective. Every lane in `mask` must call it with the same kind; the last to arrive
// calls combine(state, in, out) once, where in[l] and out[l] point at lane l's operands (null
// for lanes outside the mask). Lanes then continue with their out filled in.
enum class Collective : uint8_t { syncwarp, shfl, shfl_up, shfl_down, shfl_xor, vote, mma_ptx, ldmatrix };
using CombineFn = void (*)(const void* state, const void* const in[32], void* const out[32], unsigned mask);
void warp_collective(Collective kind, unsigned mask, const void* in, void* out, CombineFn combine, const void* state,
                     const std::source_location& where);

// This thread's lane (0..31) and the mask of lanes of its warp that exist and have not exited.
int lane_id();
unsigned active_lanes();

// True while a kernel body runs on this host thread (device functions called outside a kernel
// are a usage error).
bool in_kernel();

const char* collective_name(Collective kind);

// cp.async (ptx.h) of the running CUDA thread: copies it issued and has not waited for yet, in
// issue order, each in the group that was open when it was issued. Groups are numbered as the
// thread commits them (cp.async.commit_group); the open one is not committed yet.
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes, src_bytes;  // src_bytes < bytes: the rest of dst is zero-filled
};
void async_copy_issue(const AsyncCopy& copy, const std::source_location& where);
void async_copy_commit();
// Takes the oldest pending copy if its group is complete-able: committed, and older than the
// `keep` most recently committed groups (cp.async.wait_group keep). False when none is.
bool async_copy_next_due(int keep, AsyncCopy* out);

}  // namespace keel::emu
