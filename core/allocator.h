// Memory for tensors. The CPU gets 64-byte aligned blocks (a cache line, and what AVX-512
// loads like), blocks of 1 MB and more from a cache of freed blocks of the same size, so that a
// training step's large tensors do not page-fault anew every step (core/allocator.cpp); CUDA
// memory comes from a caching allocator (core/cuda/caching_allocator.h) so that a training step
// never calls cudaMalloc/cudaFree.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace keel {

void* allocate(Device device, size_t nbytes);
void deallocate(Device device, void* ptr, size_t nbytes);

// Byte counters the app reports: bytes handed out now, the most ever handed out at once, and
// bytes held from the system (CUDA: the driver) including the cache.
struct MemoryStats {
  size_t current = 0;
  size_t peak = 0;
  size_t reserved = 0;
};
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);

}  // namespace keel
