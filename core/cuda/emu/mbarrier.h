// sm_90's mbarrier and bulk asynchronous copy on the emulated GPU: the twins of the device
// functions in core/cuda/ptx_sm90.cuh, with the PTX ISA's semantics ("Parallel Synchronization
// and Communication Instructions: mbarrier"; "cp.async.bulk").
//
// An mbarrier is a 64-bit object in shared memory with an expected arrival count, a pending
// arrival count, a transaction count (bytes) and a phase. mbarrier.init sets the counts and
// phase 0. Each arrive takes one pending arrival, an arrive.expect_tx also adds bytes the phase
// must see land; a bulk copy that names the barrier takes its bytes off when it lands. The
// phase completes when no arrival and no byte is pending: the phase flips and the pending count
// starts again at the expected count. try_wait.parity(P) is true once the phase of parity P is
// complete, i.e. while the current phase has the other parity; a fresh barrier's phase 0 is
// current, so waiting on parity 1 passes at once (the producer's first wait on an empty slot).
//
// The emulated object: the first 32-bit word is kPhaseTag | parity, which waiting threads spin on
// (block.h, wait_for_flag; so a phase that never completes is the emulator's deadlock error,
// naming the wait); the second is the index of the barrier's state in its block (block_state.h).
// A word without the tag is a barrier used before mbarrier.init: a CudaError, where a GPU's
// behaviour is undefined.
//
// Bulk copies: when issued, the destination is filled with NaN bytes (an early read shows). A copy
// lands as late as a GPU may land it: once the phase has all its arrivals, at the next arrival,
// wait or try_wait on the barrier (or at once when a thread already sleeps on it), in the fiber of
// that thread, which then releases the barrier to the waiting threads (ThreadSanitizer sees the
// edge). So a thread that reads without waiting reads NaN; a wait on the wrong parity either
// passes too early (NaN) or never ends (deadlock); an expect_tx that announces more bytes than
// land never completes its phase (deadlock), and more bytes than announced is an error at once.
//
// TMA (cp.async.bulk.tensor) copies are bulk copies of a box that a tensor map describes
// (tma.cpp): the same NaN from issue, the same landing, with the box's rows swizzled into place.
//
// TMA stores (cp.async.bulk.tensor shared -> global) and bulk reductions (cp.reduce.async.bulk
// .add.f32) take no mbarrier: a thread commits them in bulk groups and waits with
// cp.async.bulk.wait_group.read until they have read their shared memory, or with
// cp.async.bulk.wait_group until their writes are done (bulk_group.cpp). The emulator reads the
// shared memory twice, when the copy is issued and when a wait covers it, lets the block's other
// threads run before that wait, and writes the global side then: a GPU may read at any moment in
// between, so shared memory that changed in between (a writer the copy did not wait for, a buffer
// reused before the wait, by this thread or by another that no barrier held back) is an error
// naming both places, as is a thread that exits with a copy no wait covered.
//
// fence.proxy.async orders the generic proxy's shared-memory accesses before the async proxy's
// (a bulk copy into a buffer just read, a barrier just initialized). The emulator has one proxy
// and nothing to order: the fence is checked to be called in a kernel, nothing else.
#pragma once

#include <cstdint>
#include <source_location>

namespace keel::emu::ptx {

// The tag of an initialized barrier's first word (its low bit is the phase parity).
inline constexpr uint32_t kPhaseTag = 0x4d420000u;

void mbarrier_init(uint64_t* bar, uint32_t count, const std::source_location& where);
// One arrival, announcing expect_tx bytes (0 for a plain arrive); returns the state token (the
// phase the arrival belongs to).
uint64_t mbarrier_arrive(uint64_t* bar, uint32_t expect_tx, const std::source_location& where);
// Whether the phase of this parity is complete (never waits).
bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, const std::source_location& where);
// Waits until it is: the thread sleeps while the rest of its block runs.
void mbarrier_wait_parity(uint64_t* bar, uint32_t parity, const std::source_location& where);
// cp.async.bulk global -> shared of `bytes` (a multiple of 16, both addresses 16-byte aligned),
// completing its bytes on `bar`.
void bulk_copy_global_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                const std::source_location& where);
// cp.async.bulk.tensor: the box of the tensor map (cuTensorMapEncodeTiled, tma.cpp) at coords
// (rank of them, innermost first) into dst (128-byte aligned), swizzled as the map says,
// completing its bytes on `bar`.
void tma_load(void* dst, const void* map, const int32_t* coords, int rank, uint64_t* bar,
              const std::source_location& where);
// cp.async.bulk.tensor shared -> global: the box of the map at coords from src (128-byte aligned),
// in the thread's open bulk group; bulk.commit_group closes that group; bulk.wait_group.read keep
// returns once every group but the `keep` most recently committed has read its shared memory.
void tma_store(const void* map, const int32_t* coords, int rank, const void* src, const std::source_location& where);
// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: dst[i] += src[i] for bytes / 4
// floats (bytes a multiple of 16, both 16-byte aligned), in the thread's open bulk group.
void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes, const std::source_location& where);
void bulk_commit_group(const std::source_location& where);
// cp.async.bulk.wait_group[.read] keep: both write the copies' global side here (read_only: the
// .read form, which a GPU may return from before those writes are visible).
void bulk_wait_group(int keep, bool read_only, const std::source_location& where);
void fence_proxy_async();

}  // namespace keel::emu::ptx
