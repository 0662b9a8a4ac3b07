// The emulated GPU's execution model: a grid runs block after block on the launching host
// thread; the threads of a block are fibers (fiber.h) that the block's scheduler interleaves.
//
// What makes this CUDA and not just a loop over threads is where threads wait for each other:
//  - __syncthreads: every thread of the block must arrive; then all go on.
//  - warp collectives (__syncwarp, the __shfl_*_sync family, votes, and the PTX instructions
//    mma.sync and ldmatrix of ptx.h): the lanes named in the mask must all arrive
//    at the same collective; the last to arrive computes the result for every lane.
// The CUDA rules are checked as the threads run, and a break is an EmulationError naming the
// rule, the call site, the block and the threads involved: a barrier that only part of a block
// reaches, a thread that exits while others wait for it, a mask that names an exited or absent
// lane, lanes waiting in different collectives. A real GPU would hang or return garbage.
//
// Everything here is called from the device functions in device_functions.h and ptx.h,
// and from launch.h; kernels never call it directly. The scheduler is block.cpp, the waits and
// their rules block_sync.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

// CUDA's built-in variables. Each emulated thread sees its own: the scheduler sets them
// whenever it runs a CUDA thread. constinit: no thread-local initialisation to guard, so a
// kernel reads them as plain thread-local memory.
extern constinit thread_local uint3 threadIdx;
extern constinit thread_local uint3 blockIdx;
extern constinit thread_local dim3 blockDim;
extern constinit thread_local dim3 gridDim;

namespace keel::emu {

// Runs body(ctx) once per thread of every block of `grid`; block dimensions and dynamic shared
// memory as launched (the launch configuration was checked by the caller). Rethrows the first
// error raised in any thread, after abandoning the block.
void run_grid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, void (*body)(const void* ctx), const void* ctx);

// Count-only mode (cuda::set_emulated_count_only): while on, run_grid checks nothing more and
// runs no thread, and the cuBLAS / cuBLASLt products compute nothing, so a program's launches,
// allocations and copies happen at sizes the emulator could never compute, its values meaningless.
void set_count_only(bool on);
bool count_only();

// This block's dynamic shared memory (the launch's third argument), aligned to `align`.
unsigned char* dynamic_shared(size_t align);

// Waits for the whole block (__syncthreads).
void sync_block(const std::source_location& where);

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
