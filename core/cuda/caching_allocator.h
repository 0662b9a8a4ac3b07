// A caching allocator for device memory: freed blocks go to a per-device cache keyed by
// their rounded size and are handed out again, so a training loop that repeats the same
// shapes calls cudaMalloc only in its first step. All keel kernels run on one stream per
// device, so a block freed on the host can be reused at once: stream order keeps the old
// kernel's reads ahead of the new kernel's writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"

namespace keel::cuda {

void* caching_allocate(int device, size_t nbytes);
void caching_free(int device, void* ptr, size_t nbytes);
MemoryStats caching_stats(int device);
void caching_reset_peak(int device);
// Give every cached (unused) block back to the driver (not the blocks of a graph's pool).
void empty_cache(int device);

// Memory for CUDA graphs (core/cuda/graph.h). A graph's kernels use the addresses they were
// captured with at every replay, so the blocks a capture touches belong to the graph for its life:
//  - while a capture is in progress on `device`, allocations come from the graph's private pool,
//    then from blocks already in the cache (which join the pool); never from cudaMalloc, which a
//    capture forbids: a miss is a CudaError (run the step once eagerly before capturing it, so
//    the cache holds what it needs);
//  - a block freed during the capture goes back to the pool only, as does a block the pool
//    handed out, whenever it is freed while the pool lives;
//  - release_graph_pool gives the pool's blocks back to the cache (the graph is destroyed).
// One capture per device at a time. Returns the new pool's id.
uint64_t begin_graph_pool(int device);
void end_graph_pool(int device);                        // the capture is over: allocations as usual
void release_graph_pool(int device, uint64_t pool);
// The size class a request is served from: 512-byte steps below 1 MiB, 2 MiB steps above.
inline size_t round_size(size_t nbytes) {
  constexpr size_t kSmallStep = 512, kLargeStep = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  if (nbytes == 0) nbytes = 1;
  size_t step = nbytes < kSmallLimit ? kSmallStep : kLargeStep;
  return (nbytes + step - 1) / step * step;
}

}  // namespace keel::cuda
