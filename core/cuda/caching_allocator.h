// A caching allocator for device memory: freed blocks go to a per-device cache keyed by
// their rounded size and are handed out again, so a training loop that repeats the same
// shapes calls cudaMalloc only in its first step. All keel kernels run on one stream per
// device, so a block freed on the host can be reused at once: stream order keeps the old
// kernel's reads ahead of the new kernel's writes.
#pragma once

#include <cstddef>

#include "core/allocator.h"

namespace keel::cuda {

void* caching_allocate(int device, size_t nbytes);
void caching_free(int device, void* ptr, size_t nbytes);
MemoryStats caching_stats(int device);
void caching_reset_peak(int device);
// Give every cached (unused) block back to the driver.
void empty_cache(int device);
// The size class a request is served from: 512-byte steps below 1 MiB, 2 MiB steps above.
inline size_t round_size(size_t nbytes) {
  constexpr size_t kSmallStep = 512, kLargeStep = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  if (nbytes == 0) nbytes = 1;
  size_t step = nbytes < kSmallLimit ? kSmallStep : kLargeStep;
  return (nbytes + step - 1) / step * step;
}

}  // namespace keel::cuda
